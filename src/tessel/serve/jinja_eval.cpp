// SPDX-License-Identifier: Apache-2.0
// The Jinja2 evaluator: statements write to an output string, expressions evaluate to Values with
// Python's operator semantics (int/float arithmetic, // and % rounding toward negative infinity,
// str/list concatenation and repetition, chained comparisons, and/or returning an operand).
#include "tessel/serve/jinja_eval.h"

#include <algorithm>
#include <ctime>

#include "tessel/serve/jinja_builtins.h"
#include "tessel/serve/jinja_renderer.h"

namespace tessel::serve::jinja::detail {
namespace {

int64_t as_int(const Value& v) {
  return v.kind == Value::Kind::kBool ? v.boolean : v.integer;
}
bool is_integral(const Value& v) {
  return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool;
}

}  // namespace

Renderer::Renderer(const std::vector<std::pair<std::string, Value>>& globals,
                   const RenderLimits& limits)
    : limits_(limits) {
  scopes_.emplace_back();
  add_builtins();
  for (const auto& [k, v] : globals) scopes_[0][k] = v;
  scopes_.emplace_back();  // the template's own top-level variables
}

std::string Renderer::run(const Template& t) {
  std::string out;
  exec(t.body, out);
  return out;
}

void Renderer::add_builtins() {
  Scope& g = scopes_[0];
  g["raise_exception"] = Value::of(Function([](CallArgs& a, int line) -> Value {
    fail(line, "the template rejected the conversation: " +
                   (a.args.empty() ? std::string("raise_exception() called") : to_str(a.args[0])));
  }));
  g["namespace"] = Value::of(Function([](CallArgs& a, int line) {
    Dict d;
    for (const Value& v : a.args) {
      if (!v.is_dict()) fail(line, "namespace() takes keyword arguments or a dict");
      for (const auto& [k, item] : v.dict->items) d.set(k, item);
    }
    for (auto& [k, v] : a.kwargs) d.set(k, v);
    Value ns = Value::of(std::move(d));
    ns.namespace_ = true;
    return ns;
  }));
  g["dict"] = Value::of(Function([](CallArgs& a, int line) {
    if (!a.args.empty()) fail(line, "dict() takes keyword arguments only");
    Dict d;
    for (auto& [k, v] : a.kwargs) d.set(k, v);
    return Value::of(std::move(d));
  }));
  g["range"] = Value::of(Function([](CallArgs& a, int line) {
    if (a.args.empty() || a.args.size() > 3 || !a.kwargs.empty())
      fail(line, "range() takes 1 to 3 integers");
    for (const Value& v : a.args) {
      if (!is_integral(v)) fail(line, "range() takes integers, got " + v.type_name());
    }
    int64_t start = 0, stop = 0, step = 1;
    if (a.args.size() == 1) {
      stop = as_int(a.args[0]);
    } else {
      start = as_int(a.args[0]);
      stop = as_int(a.args[1]);
      if (a.args.size() == 3) step = as_int(a.args[2]);
    }
    if (step == 0) fail(line, "range() step must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 1'000'000) fail(line, "range() is limited to 1000000 items");
      out.push_back(Value::of(i));
      if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return Value::of(std::move(out));
  }));
  g["strftime_now"] = Value::of(Function([](CallArgs& a, int line) {
    if (a.args.size() != 1 || !a.args[0].is_string())
      fail(line, "strftime_now() takes a format string");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, a.args[0].str.c_str(), &tm);
    return Value::of(std::string(buf, n));
  }));
}

void Renderer::step(int line) {
  if (++steps_ > limits_.max_steps) fail(line, "the template ran more than the step limit");
}
void Renderer::emit(std::string& out, const std::string& s, int line) {
  out += s;
  if (out.size() > limits_.max_output_bytes)
    fail(line, "the rendered text exceeds the output limit");
}

Value Renderer::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end()) return found->second;
  }
  return Value::undefined(name);
}

void Renderer::assign(const Stmt& s, Value v) {
  if (s.attr_target) {
    Value ns = lookup(s.targets[0]);
    if (!ns.is_dict() || !ns.namespace_) {
      fail(s.line, "cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
    }
    ns.dict->set(s.targets[1], std::move(v));
    return;
  }
  bind(s.targets, std::move(v), s.line);
}

void Renderer::bind(const std::vector<std::string>& names, Value v, int line) {
  if (names.size() == 1) {
    scopes_.back()[names[0]] = std::move(v);
    return;
  }
  if (!v.is_list())
    fail(line,
         "cannot unpack a " + v.type_name() + " into " + std::to_string(names.size()) + " names");
  if (v.list->size() != names.size()) {
    fail(line, "cannot unpack " + std::to_string(v.list->size()) + " values into " +
                   std::to_string(names.size()) + " names");
  }
  for (size_t i = 0; i < names.size(); ++i) scopes_.back()[names[i]] = (*v.list)[i];
}

// ---- statements ----

Flow Renderer::exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    step(s->line);
    const Flow flow = exec(*s, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Flow Renderer::exec(const Stmt& s, std::string& out) {
  switch (s.kind) {
    case Stmt::Kind::kText:
      emit(out, s.text, s.line);
      return Flow::kNormal;
    case Stmt::Kind::kOutput:
      emit(out, to_str(eval(*s.expr)), s.line);
      return Flow::kNormal;
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < s.conds.size(); ++i) {
        if (eval(*s.conds[i]).truthy()) return exec(s.bodies[i], out);
      }
      if (s.bodies.size() > s.conds.size()) return exec(s.bodies.back(), out);
      return Flow::kNormal;
    case Stmt::Kind::kFor:
      return exec_for(s, out);
    case Stmt::Kind::kSet:
      assign(s, eval(*s.expr));
      return Flow::kNormal;
    case Stmt::Kind::kSetBlock: {
      std::string captured;
      exec(s.bodies[0], captured);
      assign(s, Value::of(std::move(captured)));
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      define_macro(s);
      return Flow::kNormal;
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kBlock:
      return exec(s.bodies[0], out);
  }
  return Flow::kNormal;
}

List Renderer::items_of(const Value& v, int line) {
  if (std::optional<List> items = iteration_items(v)) return std::move(*items);
  fail(line, "'" + v.type_name() + "' object is not iterable");
}

Flow Renderer::exec_for(const Stmt& s, std::string& out) {
  List items = items_of(eval(*s.expr), s.line);
  if (s.filter) {
    List kept;
    for (Value& item : items) {
      scopes_.emplace_back();
      bind(s.targets, item, s.line);
      const bool keep = eval(*s.filter).truthy();
      scopes_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = int64_t(items.size());
  for (int64_t i = 0; i < n; ++i) {
    step(s.line);
    Dict loop;
    loop.set("index", Value::of(i + 1));
    loop.set("index0", Value::of(i));
    loop.set("revindex", Value::of(n - i));
    loop.set("revindex0", Value::of(n - i - 1));
    loop.set("first", Value::of(i == 0));
    loop.set("last", Value::of(i == n - 1));
    loop.set("length", Value::of(n));
    loop.set("depth", Value::of(int64_t(1)));
    loop.set("depth0", Value::of(int64_t(0)));
    loop.set("previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("loop.previtem"));
    loop.set("nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("loop.nextitem"));
    scopes_.emplace_back();
    scopes_.back()["loop"] = Value::of(std::move(loop));
    bind(s.targets, items[size_t(i)], s.line);
    Flow flow = Flow::kNormal;
    try {
      flow = exec(s.bodies[0], out);
    } catch (...) {
      scopes_.pop_back();
      throw;
    }
    scopes_.pop_back();
    if (flow == Flow::kBreak) break;
  }
  if (n == 0 && s.bodies.size() > 1) {
    // The else block runs in the loop's scope too: what it sets does not outlive it.
    scopes_.emplace_back();
    Flow flow = Flow::kNormal;
    try {
      flow = exec(s.bodies[1], out);
    } catch (...) {
      scopes_.pop_back();
      throw;
    }
    scopes_.pop_back();
    return flow;
  }
  return Flow::kNormal;
}

void Renderer::define_macro(const Stmt& s) {
  const Stmt* macro = &s;
  scopes_.back()[s.targets[0]] = Value::of(Function([this, macro](CallArgs& a, int line) {
    const size_t params = macro->targets.size() - 1;
    if (a.args.size() > params)
      fail(line,
           "macro '" + macro->targets[0] + "' takes " + std::to_string(params) + " arguments");
    if (++call_depth_ > limits_.max_call_depth) fail(line, "macro calls are nested too deeply");
    Scope frame;
    for (size_t i = 0; i < params; ++i) {
      const std::string& p = macro->targets[i + 1];
      if (i < a.args.size()) {
        frame[p] = a.args[i];
      } else {
        frame[p] = macro->defaults[i] ? eval(*macro->defaults[i]) : Value::undefined(p);
      }
    }
    for (auto& [k, v] : a.kwargs) {
      if (std::find(macro->targets.begin() + 1, macro->targets.end(), k) == macro->targets.end()) {
        fail(line, "macro '" + macro->targets[0] + "' has no parameter '" + k + "'");
      }
      frame[k] = v;
    }
    scopes_.push_back(std::move(frame));
    std::string out;
    try {
      exec(macro->bodies[0], out);
    } catch (...) {
      scopes_.pop_back();
      --call_depth_;
      throw;
    }
    scopes_.pop_back();
    --call_depth_;
    return Value::of(std::move(out));
  }));
}

}  // namespace tessel::serve::jinja::detail

namespace tessel::serve::jinja {

std::string render(const Template& t, const std::vector<std::pair<std::string, Value>>& globals,
                   const RenderLimits& limits) {
  return detail::Renderer(globals, limits).run(t);
}

}  // namespace tessel::serve::jinja
