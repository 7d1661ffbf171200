// SPDX-License-Identifier: Apache-2.0
// The renderer's state, shared by the statement (jinja_eval.cpp) and expression
// (jinja_eval_expr.cpp) halves: a stack of scopes (builtins and globals, the template's top
// level, then one per loop iteration or macro call) and the limits' counters.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tessel/serve/jinja_eval.h"

namespace tessel::serve::jinja::detail {

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const std::vector<std::pair<std::string, Value>>& globals, const RenderLimits& limits);
  std::string run(const Template& t);

 private:
  using Scope = std::map<std::string, Value>;

  void add_builtins();
  void step(int line);
  void emit(std::string& out, const std::string& s, int line);
  Value lookup(const std::string& name) const;
  void assign(const Stmt& s, Value v);
  void bind(const std::vector<std::string>& names, Value v, int line);

  Flow exec(const Body& body, std::string& out);
  Flow exec(const Stmt& s, std::string& out);
  List items_of(const Value& v, int line);
  Flow exec_for(const Stmt& s, std::string& out);
  void define_macro(const Stmt& s);

  Value eval(const Expr& e);
  Value binary(const std::string& op, const Value& a, const Value& b, int line);
  bool compare(const std::string& op, const Value& a, const Value& b, int line);
  Value item(const Value& obj, const Value& key, int line);
  Value slice(const Value& obj, const Expr& e);
  Value call(const Expr& e);
  CallArgs call_args(const Expr& e, size_t first);

  std::vector<Scope> scopes_;
  RenderLimits limits_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace tessel::serve::jinja::detail
