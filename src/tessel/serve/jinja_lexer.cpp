// SPDX-License-Identifier: Apache-2.0
// The Jinja2 lexer (see jinja_lexer.h for the whitespace rules it applies). String literals are
// unescaped as Python's "unicode-escape" codec does, as Jinja2 does.
#include "tessel/serve/jinja_lexer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tessel/serve/jinja_value.h"

namespace tessel::serve::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
int count_newlines(const std::string& s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to; ++i) n += s[i] == '\n';
  return n;
}

// \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string unescape(const std::string& raw, int line) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 >= raw.size()) {
      out += raw[i];
      continue;
    }
    const char c = raw[++i];
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 1; k <= digits; ++k) {
          const int h = i + k < raw.size() ? hex_value(raw[i + k]) : -1;
          if (h < 0) fail(line, std::string("truncated \\") + c + " escape in a string literal");
          cp = cp * 16 + uint32_t(h);
        }
        if (cp > 0x10ffff) fail(line, "\\U escape out of range in a string literal");
        append_utf8(out, cp);
        i += digits;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          while (k < 3 && i + k < raw.size() && raw[i + k] >= '0' && raw[i + k] <= '7') {
            cp = cp * 8 + uint32_t(raw[i + k] - '0');
            ++k;
          }
          append_utf8(out, cp);
          i += k - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(normalize(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      size_t tag = pos_;
      while (true) {
        tag = s_.find('{', tag);
        if (tag == std::string::npos || tag + 1 >= s_.size()) {
          tag = std::string::npos;
          break;
        }
        const char k = s_[tag + 1];
        if (k == '{' || k == '%' || k == '#') break;
        ++tag;
      }
      if (tag == std::string::npos) {
        emit_text(s_.substr(pos_), line_);
        break;
      }
      const char kind = s_[tag + 1];
      const char control = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      std::string text = s_.substr(pos_, tag - pos_);
      const int text_line = line_;
      line_ += count_newlines(s_, pos_, tag);
      if (control == '-') {
        text.erase(text.find_last_not_of(" \t\n\r\v\f") + 1);
      } else if (control != '+' && kind != '{') {
        const size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            text.find_first_not_of(" \t\r\v\f", l_pos) == std::string::npos) {
          text.erase(l_pos);
        }
      }
      emit_text(text, text_line);
      pos_ = tag + 2 + (control == '-' || control == '+' ? 1 : 0);
      if (kind == '#') {
        line_starting = comment();
      } else if (kind == '%' && raw_block()) {
        line_starting = last_end_newline_;
      } else {
        line_starting = tag_body(kind == '%');
      }
    }
    tokens_.push_back({TokenType::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  void emit_text(const std::string& text, int line) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, text, line});
  }

  // After a "%}" or "#}" at pos_ - 2 (with `control` before it): strip or trim what follows.
  // Returns whether the consumed end ended with a newline (lstrip_blocks' "line starting").
  bool after_end(char control, bool block) {
    if (control == '-') {
      const size_t start = pos_;
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
      line_ += count_newlines(s_, start, pos_);
      return pos_ > start && s_[pos_ - 1] == '\n';
    }
    if (block && control != '+' && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      ++line_;
      return true;
    }
    return false;
  }

  bool comment() {
    const int start_line = line_;
    const size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) fail(start_line, "unclosed comment: '{#' without '#}'");
    const char control = end > pos_ ? s_[end - 1] : '\0';
    line_ += count_newlines(s_, pos_, end);
    pos_ = end + 2;
    return after_end(control == '-' || control == '+' ? control : '\0', true);
  }

  // {% raw %}...{% endraw %}: the text between is output as written.
  bool raw_block() {
    size_t p = pos_;
    while (p < s_.size() && is_space(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0 || (p + 3 < s_.size() && is_name_start(s_[p + 3])))
      return false;
    p += 3;
    while (p < s_.size() && is_space(s_[p])) ++p;
    char control = '\0';
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) control = s_[p++];
    if (s_.compare(p, 2, "%}") != 0) return false;
    line_ += count_newlines(s_, pos_, p);
    pos_ = p + 2;
    after_end(control, true);
    const int start_line = line_;
    for (size_t q = pos_; (q = s_.find("{%", q)) != std::string::npos; q += 2) {
      size_t r = q + 2;
      const char open_control = r < s_.size() && (s_[r] == '-' || s_[r] == '+') ? s_[r++] : '\0';
      while (r < s_.size() && is_space(s_[r])) ++r;
      if (s_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < s_.size() && is_space(s_[r])) ++r;
      char end_control = '\0';
      if (r < s_.size() && (s_[r] == '-' || s_[r] == '+')) end_control = s_[r++];
      if (s_.compare(r, 2, "%}") != 0) continue;
      std::string text = s_.substr(pos_, q - pos_);
      if (open_control == '-') text.erase(text.find_last_not_of(" \t\n\r\v\f") + 1);
      emit_text(text, start_line);
      line_ += count_newlines(s_, pos_, r);
      pos_ = r + 2;
      last_end_newline_ = after_end(end_control, true);
      return true;
    }
    fail(start_line, "unclosed '{% raw %}' block: no '{% endraw %}'");
  }

  // Tokens up to the closing "}}" or "%}" (not counted while brackets are open).
  bool tag_body(bool block) {
    const int start_line = line_;
    tokens_.push_back({block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", line_});
    int depth = 0;
    while (true) {
      while (pos_ < s_.size() && is_space(s_[pos_])) line_ += s_[pos_++] == '\n';
      if (pos_ >= s_.size()) {
        fail(start_line, std::string("unclosed tag: '") + (block ? "{%" : "{{") + "' without '" +
                             (block ? "%}" : "}}") + "'");
      }
      const char* end = block ? "%}" : "}}";
      if (depth == 0) {
        char control = '\0';
        size_t at = pos_;
        if ((s_[at] == '-' || (block && s_[at] == '+')) && s_.compare(at + 1, 2, end) == 0) {
          control = s_[at++];
        }
        if (s_.compare(at, 2, end) == 0) {
          pos_ = at + 2;
          tokens_.push_back({block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", line_});
          return block ? after_end(control, true) : after_end(control == '-' ? '-' : '\0', false);
        }
      }
      const char c = s_[pos_];
      Token t{TokenType::kOp, "", line_};
      if (is_name_start(c)) {
        const size_t start = pos_;
        while (pos_ < s_.size() && (is_name_start(s_[pos_]) || is_digit(s_[pos_]))) ++pos_;
        t.type = TokenType::kName;
        t.text = s_.substr(start, pos_ - start);
      } else if (c == '\'' || c == '"') {
        size_t p = pos_ + 1;
        while (p < s_.size() && s_[p] != c) p += s_[p] == '\\' ? 2 : 1;
        if (p >= s_.size()) fail(line_, "unterminated string literal");
        t.type = TokenType::kString;
        t.text = unescape(s_.substr(pos_ + 1, p - pos_ - 1), line_);
        line_ += count_newlines(s_, pos_, p);
        pos_ = p + 1;
      } else if (is_digit(c)) {
        number(t);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                     "]",  "{",  "}",  ",",  ".",  ":",  "|", ";"};
        for (const char* op : kOps) {
          if (s_.compare(pos_, std::strlen(op), op) == 0) {
            t.text = op;
            break;
          }
        }
        if (t.text.empty()) fail(line_, std::string("unexpected character '") + c + "'");
        pos_ += t.text.size();
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if ((t.text == ")" || t.text == "]" || t.text == "}") && depth > 0) --depth;
      }
      tokens_.push_back(std::move(t));
    }
  }

  // 12, 1_000, 1.5, 2e3 (a float is not read right after a "." so x.0.1 is two lookups).
  void number(Token& t) {
    const bool after_dot =
        !tokens_.empty() && tokens_.back().type == TokenType::kOp && tokens_.back().text == ".";
    std::string digits;
    const auto run = [&] {
      while (pos_ < s_.size() && (is_digit(s_[pos_]) || (s_[pos_] == '_' && pos_ + 1 < s_.size() &&
                                                         is_digit(s_[pos_ + 1])))) {
        if (s_[pos_] != '_') digits += s_[pos_];
        ++pos_;
      }
    };
    run();
    bool real = false;
    if (!after_dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
      real = true;
      digits += s_[pos_++];
      run();
    }
    if (!after_dot && pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && is_digit(s_[p])) {
        real = true;
        digits += 'e';
        digits.append(s_, pos_ + 1, p - pos_ - 1);
        pos_ = p;
        run();
      }
    }
    if (real) {
      t.type = TokenType::kFloat;
      t.real = std::strtod(digits.c_str(), nullptr);
    } else {
      t.type = TokenType::kInt;
      errno = 0;
      t.integer = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(line_, "integer literal " + digits + " is out of range");
    }
    t.text = digits;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool last_end_newline_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  return Lexer(source).run();
}

}  // namespace tessel::serve::jinja
