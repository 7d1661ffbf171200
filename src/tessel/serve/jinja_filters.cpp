// SPDX-License-Identifier: Apache-2.0
// Jinja2's built-in filters and tests that chat templates use, with Jinja2's argument names and
// defaults; tojson is transformers' (json.dumps with ensure_ascii=False, keys unsorted).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tessel/serve/jinja_builtins.h"

namespace tessel::serve::jinja {
namespace {

// The items a filter iterates (iteration_items), or the error Jinja gives.
List iterate(const Value& v, const std::string& f, int line) {
  if (std::optional<List> items = iteration_items(v)) return std::move(*items);
  fail(line, f + ": '" + v.type_name() + "' object is not iterable");
}

// Jinja2's attribute lookup for filters: "a.b" walks dicts (and list indexes for digits).
Value attribute_path(const Value& v, const std::string& path, int line) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    if (cur.is_undefined()) {
      fail(line, cur.str.empty() ? "an item is undefined" : "'" + cur.str + "' is undefined");
    }
    const size_t dot = std::min(path.find('.', pos), path.size());
    const std::string part = path.substr(pos, dot - pos);
    if (cur.is_dict()) {
      const Value* found = cur.dict->find(part);
      cur = found ? *found : Value::undefined();
    } else if (cur.is_list() && !part.empty() &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const size_t i = std::strtoull(part.c_str(), nullptr, 10);
      cur = i < cur.list->size() ? (*cur.list)[i] : Value::undefined();
    } else {
      return Value::undefined();
    }
    pos = dot + 1;
  }
  return cur;
}

bool parse_int(std::string s, int64_t base, int64_t& out) {
  s = strip(s, nullptr, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, int(base));
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}

bool parse_float(std::string s, double& out) {
  s = strip(s, nullptr, true, true);
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return *end == '\0';
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Jinja2's title filter: upper-case the first character of each word (after whitespace or one of
// "-([{<"), lower-case the rest.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (uint32_t cp : decode_utf8(s)) {
    std::string c;
    append_utf8(c, cp);
    if (is_py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<') {
      out += c;
      word_start = true;
    } else {
      out += word_start ? str_upper(c) : str_lower(c);
      word_start = false;
    }
  }
  return out;
}

Value select(const std::string& f, const Value& value, CallArgs& args, int line) {
  const bool by_attr = f == "selectattr" || f == "rejectattr";
  const bool keep = f == "select" || f == "selectattr";
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.args.empty() || !args.args[0].is_string())
      fail(line, f + ": an attribute name is required");
    attr = args.args[next++].str;
  }
  std::string test;
  if (next < args.args.size()) {
    if (!args.args[next].is_string()) fail(line, f + ": the test name must be a string");
    test = args.args[next++].str;
  }
  CallArgs test_args;
  test_args.args.assign(args.args.begin() + long(next), args.args.end());
  List out;
  if (!value.truthy()) return Value::of(std::move(out));  // Jinja2 iterates only a truthy value
  for (const Value& item : iterate(value, f, line)) {
    const Value subject = by_attr ? attribute_path(item, attr, line) : item;
    CallArgs a = test_args;
    const bool pass = test.empty() ? subject.truthy() : apply_test(test, subject, a, line);
    if (pass == keep) out.push_back(item);
  }
  return Value::of(std::move(out));
}

}  // namespace

Value apply_filter(const std::string& name, const Value& value, CallArgs& args, int line) {
  const std::string f = "filter '" + name + "'";
  if (name == "trim") {
    check_args(args, 1, {"chars"}, f, line);
    const auto chars = arg(args, 0, "chars");
    const std::string* set = chars && chars->is_string() ? &chars->str : nullptr;
    return Value::of(strip(to_str(value), set, true, true));
  }
  if (name == "length" || name == "count") {
    check_args(args, 0, {}, f, line);
    switch (value.kind) {
      case Value::Kind::kUndefined:
        return Value::of(int64_t(0));
      case Value::Kind::kString:
        return Value::of(int64_t(utf8_length(value.str)));
      case Value::Kind::kList:
        return Value::of(int64_t(value.list->size()));
      case Value::Kind::kDict:
        return Value::of(int64_t(value.dict->items.size()));
      default:
        fail(line, "object of type '" + value.type_name() + "' has no len()");
    }
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    check_args(args, 0, {}, f, line);
    const std::string s = to_str(value);
    return Value::of(name == "upper"        ? str_upper(s)
                     : name == "lower"      ? str_lower(s)
                     : name == "capitalize" ? str_capitalize(s)
                                            : jinja_title(s));
  }
  if (name == "tojson") {
    check_args(args, 1, {"indent", "separators", "sort_keys", "ensure_ascii"}, f, line);
    const auto indent = arg(args, 0, "indent");
    const auto sort = arg(args, 99, "sort_keys");
    const auto ascii = arg(args, 99, "ensure_ascii");
    const auto seps = arg(args, 99, "separators");
    if (ascii && ascii->truthy()) fail(line, "tojson: ensure_ascii=True is not supported");
    if (seps && !seps->is_none()) fail(line, "tojson: custom separators are not supported");
    int width = -1;
    if (indent && !indent->is_none()) {
      if (indent->kind != Value::Kind::kInt || indent->integer < 0 || indent->integer > 64) {
        fail(line, "tojson: indent must be an integer in [0, 64]");
      }
      width = int(indent->integer);
    }
    return Value::of(to_json(value, width, sort && sort->truthy(), line));
  }
  if (name == "string") {
    check_args(args, 0, {}, f, line);
    return Value::of(to_str(value));
  }
  if (name == "safe") {
    check_args(args, 0, {}, f, line);
    return value;
  }
  if (name == "e" || name == "escape") {
    check_args(args, 0, {}, f, line);
    return Value::of(html_escape(to_str(value)));
  }
  if (name == "int") {
    check_args(args, 2, {"default", "base"}, f, line);
    const Value fallback = arg(args, 0, "default").value_or(Value::of(int64_t(0)));
    const auto base = arg(args, 1, "base");
    int64_t b = base && base->kind == Value::Kind::kInt ? base->integer : 10;
    if (b != 0 && (b < 2 || b > 36)) fail(line, "int: base must be 0 or in [2, 36]");
    int64_t out = 0;
    double d = 0;
    switch (value.kind) {
      case Value::Kind::kInt:
        return value;
      case Value::Kind::kBool:
        return Value::of(int64_t(value.boolean));
      case Value::Kind::kFloat:
        if (!std::isfinite(value.real) || std::abs(value.real) > 9.2e18) return fallback;
        return Value::of(int64_t(value.real));
      case Value::Kind::kString:
        if (parse_int(value.str, b, out)) return Value::of(out);
        if (parse_float(value.str, d) && std::isfinite(d) && std::abs(d) < 9.2e18) {
          return Value::of(int64_t(d));
        }
        return fallback;
      case Value::Kind::kUndefined:
        fail(line, "int: the value is undefined");
      default:
        return fallback;
    }
  }
  if (name == "float") {
    check_args(args, 1, {"default"}, f, line);
    const Value fallback = arg(args, 0, "default").value_or(Value::of(0.0));
    double d = 0;
    if (value.is_number()) return Value::of(value.as_double());
    if (value.is_string() && parse_float(value.str, d)) return Value::of(d);
    if (value.is_undefined()) fail(line, "float: the value is undefined");
    return fallback;
  }
  if (name == "default" || name == "d") {
    check_args(args, 2, {"default_value", "boolean"}, f, line);
    const Value fallback = arg(args, 0, "default_value").value_or(Value::of(""));
    const auto boolean = arg(args, 1, "boolean");
    const bool use = value.is_undefined() || (boolean && boolean->truthy() && !value.truthy());
    return use ? fallback : value;
  }
  if (name == "first" || name == "last") {
    check_args(args, 0, {}, f, line);
    const List items = iterate(value, f, line);
    if (items.empty()) return Value::undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    check_args(args, 2, {"d", "attribute"}, f, line);
    const auto sep = arg(args, 0, "d");
    const auto attr = arg(args, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(value, f, line)) {
      if (!first) out += sep ? to_str(*sep) : "";
      first = false;
      out += to_str(attr && attr->is_string() ? attribute_path(item, attr->str, line) : item);
    }
    return Value::of(std::move(out));
  }
  if (name == "replace") {
    check_args(args, 3, {"old", "new", "count"}, f, line);
    const auto old = arg(args, 0, "old"), with = arg(args, 1, "new"), count = arg(args, 2, "count");
    if (!old || !with) fail(line, f + " takes (old, new[, count])");
    int64_t n = -1;
    if (count && count->kind == Value::Kind::kInt) n = count->integer;
    return Value::of(str_replace(to_str(value), to_str(*old), to_str(*with), n));
  }
  if (name == "items") {
    check_args(args, 0, {}, f, line);
    if (value.is_undefined()) return Value::of(List{});
    if (!value.is_dict()) fail(line, "items: a mapping is expected, got " + value.type_name());
    List out;
    for (const auto& [k, v] : value.dict->items)
      out.push_back(Value::of(List{Value::of(k), v}, true));
    return Value::of(std::move(out));
  }
  if (name == "list") {
    check_args(args, 0, {}, f, line);
    return Value::of(iterate(value, f, line));
  }
  if (name == "reverse") {
    check_args(args, 0, {}, f, line);
    if (value.is_string()) {
      auto cps = decode_utf8(value.str);
      std::reverse(cps.begin(), cps.end());
      return Value::of(encode_utf8(cps));
    }
    List items = iterate(value, f, line);
    std::reverse(items.begin(), items.end());
    return Value::of(std::move(items));
  }
  if (name == "abs") {
    check_args(args, 0, {}, f, line);
    if (value.kind == Value::Kind::kInt) {
      if (value.integer == INT64_MIN) fail(line, "abs: integer overflow");
      return Value::of(value.integer < 0 ? -value.integer : value.integer);
    }
    if (value.kind == Value::Kind::kBool) return Value::of(int64_t(value.boolean));
    if (value.kind == Value::Kind::kFloat) return Value::of(std::fabs(value.real));
    fail(line, "abs: bad operand type '" + value.type_name() + "'");
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return select(name, value, args, line);
  }
  if (name == "map") {
    check_args(args, 1, {"attribute", "default"}, f, line);
    const auto attr = arg(args, 99, "attribute");
    const auto fallback = arg(args, 99, "default");
    List out;
    if (!value.truthy()) return Value::of(std::move(out));
    for (const Value& item : iterate(value, f, line)) {
      if (attr) {
        Value v = attribute_path(item, to_str(*attr), line);
        out.push_back(v.is_undefined() && fallback ? *fallback : v);
      } else {
        if (args.args.empty() || !args.args[0].is_string())
          fail(line, "map: a filter name or attribute= is required");
        CallArgs none;
        out.push_back(apply_filter(args.args[0].str, item, none, line));
      }
    }
    return Value::of(std::move(out));
  }
  if (name == "indent") {
    check_args(args, 3, {"width", "first", "blank"}, f, line);
    const auto width = arg(args, 0, "width");
    std::string pad = width && width->is_string()
                          ? width->str
                          : std::string(size_t(width && width->kind == Value::Kind::kInt
                                                   ? std::clamp<int64_t>(width->integer, 0, 256)
                                                   : 4),
                                        ' ');
    const bool first = arg(args, 1, "first").value_or(Value::of(false)).truthy();
    const bool blank = arg(args, 2, "blank").value_or(Value::of(false)).truthy();
    const std::string s = to_str(value);
    std::string out;
    size_t pos = 0;
    bool first_line = true;
    while (pos <= s.size()) {
      const size_t nl = std::min(s.find('\n', pos), s.size());
      const std::string text = s.substr(pos, nl - pos);
      if (!first_line) out += '\n';
      if ((first_line ? first : true) && (blank || !strip(text, nullptr, true, true).empty()))
        out += pad;
      out += text;
      first_line = false;
      pos = nl + 1;
    }
    return Value::of(std::move(out));
  }
  fail(line, "unknown filter '" + name + "'");
}

namespace {

constexpr const char* kFilters[] = {
    "trim",   "length", "count", "upper",      "lower",      "capitalize", "title",   "tojson",
    "string", "safe",   "e",     "escape",     "int",        "float",      "default", "d",
    "first",  "last",   "join",  "replace",    "items",      "list",       "reverse", "abs",
    "select", "reject", "map",   "selectattr", "rejectattr", "indent"};
constexpr const char* kUnaryTests[] = {"defined",  "undefined", "none",   "string",   "mapping",
                                       "iterable", "sequence",  "number", "integer",  "float",
                                       "boolean",  "true",      "false",  "callable", "lower",
                                       "upper",    "odd",       "even"};
constexpr const char* kBinaryTests[] = {
    "divisibleby", "eq", "equalto", "==", "ne", "!=", "sameas", "in",
    "lt",          "le", "gt",      ">",  "<",  "<=", ">=",     "ge"};

template <size_t N>
bool listed(const char* const (&names)[N], const std::string& name) {
  return std::find_if(std::begin(names), std::end(names),
                      [&](const char* n) { return name == n; }) != std::end(names);
}

}  // namespace

bool is_filter(const std::string& name) {
  return listed(kFilters, name);
}
bool is_test(const std::string& name) {
  return listed(kUnaryTests, name) || listed(kBinaryTests, name);
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args, int line) {
  using K = Value::Kind;
  if (listed(kUnaryTests, name) && (!args.args.empty() || !args.kwargs.empty())) {
    fail(line, "test '" + name + "' takes no argument");
  }
  const auto other = [&]() -> const Value& {
    if (args.args.size() != 1) fail(line, "test '" + name + "' takes one argument");
    return args.args[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.boolean;
  if (name == "false") return v.kind == K::kBool && !v.boolean;
  if (name == "callable") return v.kind == K::kFunction;
  if (name == "lower")
    return to_str(v) == str_lower(to_str(v)) && str_upper(to_str(v)) != to_str(v);
  if (name == "upper")
    return to_str(v) == str_upper(to_str(v)) && str_lower(to_str(v)) != to_str(v);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    // Jinja2: value % 2 == 1, value % 2 == 0, value % num == 0, with Python's modulo.
    if (!v.is_number()) fail(line, "test '" + name + "' needs a number, got " + v.type_name());
    const Value d = name == "divisibleby" ? other() : Value::of(int64_t(2));
    if (!d.is_number() || d.as_double() == 0) fail(line, "test '" + name + "': modulo by zero");
    double r = 0;
    if (v.kind != K::kFloat && d.kind != K::kFloat) {
      const int64_t a = v.kind == K::kBool ? v.boolean : v.integer;
      const int64_t b = d.kind == K::kBool ? d.boolean : d.integer;
      r = double(b == -1 ? 0 : ((a % b) + b) % b);
    } else {
      const double q = d.as_double();
      r = std::fmod(v.as_double(), q);
      if (r != 0 && ((r < 0) != (q < 0))) r += q;
    }
    return name == "odd" ? r == 1 : r == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "sameas") {
    const Value& o = other();
    if (v.is_list() || v.is_dict())
      return v.kind == o.kind && (v.list == o.list && v.dict == o.dict);
    return v.kind == o.kind && equals(v, o);
  }
  if (name == "in") {
    const Value& o = other();
    if (o.is_string()) return v.is_string() && o.str.find(v.str) != std::string::npos;
    if (o.is_dict()) return v.is_string() && o.dict->find(v.str) != nullptr;
    if (o.is_list()) {
      return std::any_of(o.list->begin(), o.list->end(),
                         [&](const Value& x) { return equals(x, v); });
    }
    return false;
  }
  if (name == "lt" || name == "le" || name == "gt" || name == "ge" || name == "<" || name == "<=" ||
      name == ">" || name == ">=") {
    const Value& o = other();
    if (!v.is_number() || !o.is_number()) fail(line, "test '" + name + "' compares numbers");
    const double a = v.as_double(), b = o.as_double();
    if (name == "lt" || name == "<") return a < b;
    if (name == "le" || name == "<=") return a <= b;
    if (name == "gt" || name == ">") return a > b;
    return a >= b;
  }
  fail(line, "unknown test '" + name + "'");
}

}  // namespace tessel::serve::jinja
