// SPDX-License-Identifier: Apache-2.0
// Python string helpers and the str / dict / list methods templates call.
#include <algorithm>

#include "tessel/serve/jinja_builtins.h"

namespace tessel::serve::jinja {
namespace {

uint32_t upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7) || (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) ||
      (c >= 0x430 && c <= 0x44f)) {
    return c - 32;
  }
  if (c == 0x3c2) return 0x3a3;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}
uint32_t lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7) || (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) ||
      (c >= 0x410 && c <= 0x42f)) {
    return c + 32;
  }
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}
bool is_cased(uint32_t c) {
  return upper_cp(c) != c || lower_cp(c) != c;
}

std::string map_cps(const std::string& s, uint32_t (*f)(uint32_t)) {
  auto cps = decode_utf8(s);
  for (auto& c : cps) c = f(c);
  return encode_utf8(cps);
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start, int line) {
  const auto test = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return start ? s.compare(0, a.size(), a) == 0
                 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_string()) return test(affix.str);
  if (affix.is_list() && affix.tuple) {
    for (const Value& v : *affix.list) {
      if (!v.is_string()) fail(line, "startswith/endswith: a tuple of strings is expected");
      if (test(v.str)) return true;
    }
    return false;
  }
  fail(line, std::string(start ? "startswith" : "endswith") +
                 " first arg must be str or a tuple of str, not " + affix.type_name());
}

const std::string* optional_string(const std::optional<Value>& v, const char* what, int line) {
  if (!v || v->is_none()) return nullptr;
  if (!v->is_string()) fail(line, std::string(what) + " must be a string, not " + v->type_name());
  return &v->str;
}

int64_t int_arg(const std::optional<Value>& v, int64_t fallback, const char* what, int line) {
  if (!v || v->is_none()) return fallback;
  if (v->kind == Value::Kind::kInt) return v->integer;
  if (v->kind == Value::Kind::kBool) return v->boolean;
  fail(line, std::string(what) + " must be an integer, not " + v->type_name());
}

}  // namespace

bool is_py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

std::string str_upper(const std::string& s) {
  return map_cps(s, upper_cp);
}
std::string str_lower(const std::string& s) {
  return map_cps(s, lower_cp);
}

std::string str_capitalize(const std::string& s) {
  auto cps = decode_utf8(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? upper_cp(cps[i]) : lower_cp(cps[i]);
  return encode_utf8(cps);
}

std::string str_title(const std::string& s) {
  auto cps = decode_utf8(s);
  bool previous_cased = false;
  for (auto& c : cps) {
    if (is_cased(c)) {
      c = previous_cased ? lower_cp(c) : upper_cp(c);
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return encode_utf8(cps);
}

std::string strip(const std::string& s, const std::string* chars, bool left, bool right) {
  const auto cps = decode_utf8(s);
  const auto set = chars ? decode_utf8(*chars) : std::vector<uint32_t>{};
  const auto drop = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && drop(cps[b])) ++b;
  }
  if (right) {
    while (e > b && drop(cps[e - 1])) --e;
  }
  return encode_utf8(std::vector<uint32_t>(cps.begin() + long(b), cps.begin() + long(e)));
}

List str_split(const std::string& s, const std::string* sep, int64_t maxsplit, int line) {
  List out;
  if (sep) {
    if (sep->empty()) fail(line, "split: empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, pos);
      if (at == std::string::npos) break;
      out.push_back(Value::of(s.substr(pos, at - pos)));
      pos = at + sep->size();
    }
    out.push_back(Value::of(s.substr(pos)));
    return out;
  }
  const auto cps = decode_utf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_py_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
      size_t e = cps.size();
      while (e > i && is_py_space(cps[e - 1])) --e;
      out.push_back(Value::of(encode_utf8({cps.begin() + long(i), cps.begin() + long(e)})));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !is_py_space(cps[j])) ++j;
    out.push_back(Value::of(encode_utf8({cps.begin() + long(i), cps.begin() + long(j)})));
    i = j;
  }
  return out;
}

std::string str_replace(const std::string& s, const std::string& old, const std::string& with,
                        int64_t count) {
  std::string out;
  if (old.empty()) {
    const auto cps = decode_utf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      if (i < cps.size()) append_utf8(out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += with;
    pos = at + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::optional<Value> arg(CallArgs& args, size_t position, const std::string& keyword) {
  for (const auto& [name, value] : args.kwargs) {
    if (name == keyword) return value;
  }
  if (position < args.args.size()) return args.args[position];
  return std::nullopt;
}

void check_args(const CallArgs& args, size_t positional,
                std::initializer_list<const char*> keywords, const std::string& f, int line) {
  if (args.args.size() > positional) {
    fail(line, f + " takes at most " + std::to_string(positional) + " positional argument" +
                   (positional == 1 ? "" : "s") + ", got " + std::to_string(args.args.size()));
  }
  for (const auto& [name, value] : args.kwargs) {
    if (std::find_if(keywords.begin(), keywords.end(), [&](const char* k) { return name == k; }) ==
        keywords.end()) {
      fail(line, f + " got an unexpected keyword argument '" + name + "'");
    }
  }
}

std::optional<Value> call_method(const Value& obj, const std::string& name, CallArgs& args,
                                 int line) {
  if (obj.is_string()) {
    const std::string& s = obj.str;
    const std::string f = "str." + name + "()";
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      check_args(args, 1, {}, f, line);
      const auto chars = arg(args, 0, "");
      return Value::of(strip(s, optional_string(chars, "strip chars", line), name != "rstrip",
                             name != "lstrip"));
    }
    if (name == "startswith" || name == "endswith") {
      check_args(args, 1, {}, f, line);
      if (args.args.empty()) fail(line, f + " takes exactly one argument");
      return Value::of(starts_or_ends(s, args.args[0], name == "startswith", line));
    }
    if (name == "split" || name == "rsplit") {
      check_args(args, 2, {"sep", "maxsplit"}, f, line);
      const auto sep = arg(args, 0, "sep");
      const int64_t maxsplit = int_arg(arg(args, 1, "maxsplit"), -1, "maxsplit", line);
      if (name == "rsplit" && maxsplit >= 0)
        fail(line, "str.rsplit() with maxsplit is not supported");
      return Value::of(str_split(s, optional_string(sep, "sep", line), maxsplit, line));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      check_args(args, 0, {}, f, line);
      return Value::of(name == "upper"   ? str_upper(s)
                       : name == "lower" ? str_lower(s)
                       : name == "title" ? str_title(s)
                                         : str_capitalize(s));
    }
    if (name == "replace") {
      check_args(args, 3, {}, f, line);
      if (args.args.size() < 2 || !args.args[0].is_string() || !args.args[1].is_string()) {
        fail(line, f + " takes two strings (old, new) and an optional count");
      }
      return Value::of(str_replace(s, args.args[0].str, args.args[1].str,
                                   int_arg(arg(args, 2, ""), -1, "count", line)));
    }
    if (name == "find" || name == "count") {
      check_args(args, 1, {}, f, line);
      if (args.args.size() != 1 || !args.args[0].is_string()) fail(line, f + " takes one string");
      const std::string& needle = args.args[0].str;
      if (name == "find") {
        const size_t at = s.find(needle);
        if (at == std::string::npos) return Value::of(int64_t(-1));
        return Value::of(int64_t(utf8_length(s.substr(0, at))));
      }
      if (needle.empty()) return Value::of(int64_t(utf8_length(s) + 1));
      int64_t n = 0;
      for (size_t at = s.find(needle); at != std::string::npos;
           at = s.find(needle, at + needle.size()))
        ++n;
      return Value::of(n);
    }
    if (name == "join") {
      check_args(args, 1, {}, f, line);
      if (args.args.size() != 1 || !args.args[0].is_list()) fail(line, f + " takes one list");
      std::string out;
      for (size_t i = 0; i < args.args[0].list->size(); ++i) {
        const Value& item = (*args.args[0].list)[i];
        if (!item.is_string()) fail(line, f + ": item " + std::to_string(i) + " is not a string");
        out += (i ? s : "") + item.str;
      }
      return Value::of(std::move(out));
    }
    return std::nullopt;
  }
  if (obj.is_dict() && !obj.namespace_) {
    const std::string f = "dict." + name + "()";
    if (name == "items" || name == "keys" || name == "values") {
      check_args(args, 0, {}, f, line);
      List out;
      for (const auto& [k, v] : obj.dict->items) {
        if (name == "items") {
          out.push_back(Value::of(List{Value::of(k), v}, true));
        } else {
          out.push_back(name == "keys" ? Value::of(k) : v);
        }
      }
      return Value::of(std::move(out));
    }
    if (name == "get") {
      check_args(args, 2, {}, f, line);
      if (args.args.empty()) fail(line, f + " takes a key");
      const Value* found = args.args[0].is_string() ? obj.dict->find(args.args[0].str) : nullptr;
      if (found) return *found;
      return args.args.size() > 1 ? args.args[1] : Value::none();
    }
    return std::nullopt;
  }
  if (obj.is_list()) {
    if (name == "append" || name == "pop" || name == "insert" || name == "extend" ||
        name == "remove" || name == "clear" || name == "sort" || name == "reverse") {
      fail(line, "lists cannot be modified (list." + name + "()); use a namespace() instead");
    }
    if (name == "index" || name == "count") {
      check_args(args, 1, {}, "list." + name + "()", line);
      if (args.args.size() != 1) fail(line, "list." + name + "() takes one argument");
      int64_t n = 0;
      for (size_t i = 0; i < obj.list->size(); ++i) {
        if (!equals((*obj.list)[i], args.args[0])) continue;
        if (name == "index") return Value::of(int64_t(i));
        ++n;
      }
      if (name == "index") fail(line, "list.index(x): x not in list");
      return Value::of(n);
    }
  }
  return std::nullopt;
}

}  // namespace tessel::serve::jinja
