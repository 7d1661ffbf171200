// SPDX-License-Identifier: Apache-2.0
// The filters, tests and methods of the Jinja2 subset: Jinja2's built-in filters and tests that
// chat templates use, and the Python str / dict methods they call (message.content.strip(),
// message.items()), with Python's results. Lists are immutable, as in the sandbox transformers
// renders templates in.
#pragma once

#include <optional>
#include <string>

#include "tessel/serve/jinja_value.h"

namespace tessel::serve::jinja {

// Whether a filter or test of that name exists (the parser refuses unknown ones, as Jinja2's
// compiler does).
bool is_filter(const std::string& name);
bool is_test(const std::string& name);
// value | name(args). An unknown filter or a wrong argument is an Error naming it.
Value apply_filter(const std::string& name, const Value& value, CallArgs& args, int line);
// value is name(args).
bool apply_test(const std::string& name, const Value& value, CallArgs& args, int line);
// obj.name(args) for strings, dicts and lists; nullopt when that type has no such method.
std::optional<Value> call_method(const Value& obj, const std::string& name, CallArgs& args,
                                 int line);
// Python's str.strip / lstrip / rstrip (whitespace when chars is null).
std::string strip(const std::string& s, const std::string* chars, bool left, bool right);

// Python's str.upper / lower / capitalize / title and str.isspace, with case mapped for ASCII,
// Latin-1, Greek and Cyrillic (other scripts pass through unchanged).
std::string str_upper(const std::string& s);
std::string str_lower(const std::string& s);
std::string str_capitalize(const std::string& s);
std::string str_title(const std::string& s);
bool is_py_space(uint32_t cp);
// Python's str.split(sep, maxsplit) (sep null: runs of whitespace) and str.replace.
List str_split(const std::string& s, const std::string* sep, int64_t maxsplit, int line);
std::string str_replace(const std::string& s, const std::string& old, const std::string& with,
                        int64_t count);

// Reads an argument by position or keyword, or nullopt when not given.
std::optional<Value> arg(CallArgs& args, size_t position, const std::string& keyword);
// Refuses arguments beyond `positional` or with names not in `keywords` ("f" names the callee).
void check_args(const CallArgs& args, size_t positional,
                std::initializer_list<const char*> keywords, const std::string& f, int line);

}  // namespace tessel::serve::jinja
