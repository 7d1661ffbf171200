// SPDX-License-Identifier: Apache-2.0
// Values of tessel's Jinja2 interpreter (the subset chat templates use; docs/SERVING.md). They
// follow Python's semantics where templates can see them: lists and dicts are shared by
// reference, dicts keep insertion order, str() of a value is Python's (True, None, 1.0, ['a']),
// strings index and measure by code point, and an undefined name is Jinja's default Undefined
// (renders as "", is falsy and iterates as empty; arithmetic on it or a member of it is an error).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessel::serve::jinja {

struct Value;
struct Dict;
using List = std::vector<Value>;

// Arguments of a call: positional, then keyword (name, value) in the order written.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};
using Function = std::function<Value(CallArgs&, int line)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };
  Kind kind = Kind::kUndefined;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string str;  // kString; kUndefined: the name that was looked up (for error messages)
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> function;
  bool tuple = false;       // kList: written as a tuple (printed with parentheses)
  bool namespace_ = false;  // kDict: made by namespace() (the only one attributes may be set on)

  static Value undefined(std::string name = {});
  static Value none();
  static Value of(bool b);
  static Value of(int64_t i);
  static Value of(int i) { return of(int64_t(i)); }
  static Value of(double d);
  static Value of(std::string s);
  static Value of(const char* s) { return of(std::string(s)); }
  static Value of(List items, bool tuple = false);
  static Value of(Dict d);
  static Value of(Function f);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  double as_double() const;

  bool truthy() const;
  // Python's type name ("str", "int", "list", "dict", "NoneType", "undefined") for error messages.
  std::string type_name() const;
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

// Python's str(): what {{ value }} prints (an undefined value prints nothing).
std::string to_str(const Value& v);
// Python's repr() (strings quoted as Python quotes them), used inside lists and dicts.
std::string to_repr(const Value& v);
// Python's ==, with Jinja's rule that two undefined values are equal.
bool equals(const Value& a, const Value& b);
// JSON text as transformers' tojson filter writes it (json.dumps with ensure_ascii=False): keys in
// insertion order unless sort_keys; indent < 0 means on one line with ", " and ": ".
std::string to_json(const Value& v, int indent, bool sort_keys, int line);

// UTF-8 strings as code points and back (ill-formed bytes pass through as single units).
std::vector<uint32_t> decode_utf8(const std::string& s);
std::string encode_utf8(const std::vector<uint32_t>& cps);
void append_utf8(std::string& out, uint32_t cp);
size_t utf8_length(const std::string& s);
// What a for loop or a filter iterates: a list's items, a dict's keys, a string's characters,
// nothing for undefined; nullopt for a value that is not iterable (numbers, namespaces, ...).
std::optional<List> iteration_items(const Value& v);

// The error every failure of a template raises: "chat template line N: message".
[[noreturn]] void fail(int line, const std::string& message);

}  // namespace tessel::serve::jinja
