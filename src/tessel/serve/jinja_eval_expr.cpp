// SPDX-License-Identifier: Apache-2.0
// Expression evaluation for the Jinja2 renderer: Python's operators on Values, attribute and item
// lookup as Jinja2's environment does it (dict keys for both; a missing one is undefined, but any
// lookup on an undefined value is an error), slices, calls, filters and tests.
#include <cmath>

#include "tessel/serve/jinja_builtins.h"
#include "tessel/serve/jinja_renderer.h"

namespace tessel::serve::jinja::detail {
namespace {

constexpr size_t kMaxRepeat = size_t(16) << 20;  // bytes a * repetition may build

[[noreturn]] void undefined_error(const Value& v, int line) {
  fail(line, v.str.empty() ? std::string("a value is undefined") : "'" + v.str + "' is undefined");
}

int64_t as_int(const Value& v) {
  return v.kind == Value::Kind::kBool ? v.boolean : v.integer;
}
bool is_integral(const Value& v) {
  return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool;
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b, int line) {
  fail(line, "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                 b.type_name() + "'");
}

Value repeat(const Value& seq, int64_t n, int line) {
  if (n < 0) n = 0;
  const size_t unit = seq.is_string() ? seq.str.size() : seq.list->size() * 16;
  if (unit != 0 && size_t(n) > kMaxRepeat / unit) fail(line, "repetition result is too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str;
    return Value::of(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::of(std::move(out), seq.tuple);
}

// Python's index normalisation for a sequence of length n; nullopt when out of range.
std::optional<size_t> index_of(int64_t i, size_t n) {
  if (i < 0) i += int64_t(n);
  if (i < 0 || i >= int64_t(n)) return std::nullopt;
  return size_t(i);
}

}  // namespace

Value Renderer::binary(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") return Value::of(to_str(a) + to_str(b));
  if (a.is_undefined()) undefined_error(a, line);
  if (b.is_undefined()) undefined_error(b, line);
  if (a.is_number() && b.is_number()) {
    const bool ints = is_integral(a) && is_integral(b);
    const int64_t x = as_int(a), y = as_int(b);
    const double p = a.as_double(), q = b.as_double();
    int64_t r = 0;
    if (op == "+") {
      if (!ints) return Value::of(p + q);
      if (__builtin_add_overflow(x, y, &r)) fail(line, "integer overflow in +");
      return Value::of(r);
    }
    if (op == "-") {
      if (!ints) return Value::of(p - q);
      if (__builtin_sub_overflow(x, y, &r)) fail(line, "integer overflow in -");
      return Value::of(r);
    }
    if (op == "*") {
      if (!ints) return Value::of(p * q);
      if (__builtin_mul_overflow(x, y, &r)) fail(line, "integer overflow in *");
      return Value::of(r);
    }
    if (op == "/") {
      if (q == 0) fail(line, "division by zero");
      return Value::of(p / q);
    }
    if (op == "//" || op == "%") {
      if (q == 0) fail(line, op == "//" ? "integer division by zero" : "modulo by zero");
      if (ints) {
        if (x == INT64_MIN && y == -1) fail(line, "integer overflow in " + op);
        int64_t quot = x / y, rem = x % y;
        if (rem != 0 && ((rem < 0) != (y < 0))) {
          --quot;
          rem += y;
        }
        return Value::of(op == "//" ? quot : rem);
      }
      // CPython's float_divmod.
      double mod = std::fmod(p, q);
      double div = (p - mod) / q;
      if (mod != 0 && ((q < 0) != (mod < 0))) {
        mod += q;
        div -= 1.0;
      }
      if (op == "%") return Value::of(mod != 0 ? mod : std::copysign(0.0, q));
      if (div == 0) return Value::of(std::copysign(0.0, p / q));
      double floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
      return Value::of(floordiv);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t result = 1, base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(result, base, &result))
            fail(line, "integer overflow in **");
          if (e > 1 && __builtin_mul_overflow(base, base, &base))
            fail(line, "integer overflow in **");
        }
        return Value::of(result);
      }
      if (p == 0 && q < 0) fail(line, "0.0 cannot be raised to a negative power");
      return Value::of(std::pow(p, q));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::of(a.str + b.str);
    if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::of(std::move(out), a.tuple);
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && is_integral(b)) return repeat(a, as_int(b), line);
    if (is_integral(a) && (b.is_string() || b.is_list())) return repeat(b, as_int(a), line);
  }
  if (op == "%" && a.is_string())
    fail(line, "printf-style string formatting (str % ...) is not supported");
  unsupported(op, a, b, line);
}

bool Renderer::compare(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string())
        fail(line, "'in <string>' requires string as left operand, not " + a.type_name());
      found = b.str.find(a.str) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& x : *b.list) found = found || equals(x, a);
    } else if (b.is_dict()) {
      if ((a.is_list() && !a.tuple) || a.is_dict())
        fail(line, "unhashable type: '" + a.type_name() + "'");
      found = a.is_string() && b.dict->find(a.str) != nullptr;
    } else if (!b.is_undefined()) {
      fail(line, "argument of type '" + b.type_name() + "' is not iterable");
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) undefined_error(a, line);
  if (b.is_undefined()) undefined_error(b, line);
  int c = 0;
  if (a.is_number() && b.is_number()) {
    if (is_integral(a) && is_integral(b)) {
      c = as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b) ? 1 : 0;
    } else {
      const double p = a.as_double(), q = b.as_double();
      if (std::isnan(p) || std::isnan(q)) return false;
      c = p < q ? -1 : p > q ? 1 : 0;
    }
  } else if (a.is_string() && b.is_string()) {
    c = a.str.compare(b.str);
  } else if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
    const size_t n = std::min(a.list->size(), b.list->size());
    size_t i = 0;
    while (i < n && equals((*a.list)[i], (*b.list)[i])) ++i;
    if (i < n) return compare(op, (*a.list)[i], (*b.list)[i], line);
    c = a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  } else {
    fail(line, "'" + op + "' not supported between instances of '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
  }
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value Renderer::item(const Value& obj, const Value& key, int line) {
  switch (obj.kind) {
    case Value::Kind::kUndefined:
      undefined_error(obj, line);
    case Value::Kind::kDict: {
      if (!key.is_string()) return Value::undefined();
      const Value* found = obj.dict->find(key.str);
      return found ? *found : Value::undefined(key.str);
    }
    case Value::Kind::kList:
      if (is_integral(key)) {
        const auto i = index_of(as_int(key), obj.list->size());
        return i ? (*obj.list)[*i] : Value::undefined();
      }
      return Value::undefined(key.is_string() ? key.str : "");
    case Value::Kind::kString:
      if (is_integral(key)) {
        const auto cps = decode_utf8(obj.str);
        const auto i = index_of(as_int(key), cps.size());
        if (!i) return Value::undefined();
        std::string c;
        append_utf8(c, cps[*i]);
        return Value::of(std::move(c));
      }
      return Value::undefined(key.is_string() ? key.str : "");
    default:
      return Value::undefined(key.is_string() ? key.str : "");
  }
}

Value Renderer::slice(const Value& obj, const Expr& e) {
  if (obj.is_undefined()) undefined_error(obj, e.line);
  int64_t bounds[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.children[size_t(k) + 1]) continue;
    const Value v = eval(*e.children[size_t(k) + 1]);
    if (v.is_none()) continue;
    if (!is_integral(v))
      fail(e.line, "slice indices must be integers or None, not " + v.type_name());
    bounds[k] = as_int(v);
    given[k] = true;
  }
  const int64_t step = bounds[2];
  if (step == 0) fail(e.line, "slice step cannot be zero");
  std::vector<uint32_t> cps;
  size_t n = 0;
  if (obj.is_string()) {
    cps = decode_utf8(obj.str);
    n = cps.size();
  } else if (obj.is_list()) {
    n = obj.list->size();
  } else {
    fail(e.line, "'" + obj.type_name() + "' object is not subscriptable");
  }
  const int64_t len = int64_t(n);
  const auto clamp = [&](int64_t i, bool is_given, int64_t fallback) {
    if (!is_given) return fallback;
    if (i < 0) i += len;
    if (step > 0) return std::clamp<int64_t>(i, 0, len);
    return std::clamp<int64_t>(i, -1, len - 1);
  };
  const int64_t start = clamp(bounds[0], given[0], step > 0 ? 0 : len - 1);
  const int64_t stop = clamp(bounds[1], given[1], step > 0 ? len : -1);
  std::vector<size_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(size_t(i));
  if (obj.is_string()) {
    std::string out;
    for (size_t i : picks) append_utf8(out, cps[i]);
    return Value::of(std::move(out));
  }
  List out;
  for (size_t i : picks) out.push_back((*obj.list)[i]);
  return Value::of(std::move(out), obj.tuple);
}

CallArgs Renderer::call_args(const Expr& e, size_t first) {
  CallArgs args;
  const size_t positional = e.children.size() - e.kwargs.size();
  for (size_t i = first; i < e.children.size(); ++i) {
    Value v = eval(*e.children[i]);
    if (i < positional) {
      args.args.push_back(std::move(v));
    } else {
      args.kwargs.emplace_back(e.kwargs[i - positional], std::move(v));
    }
  }
  return args;
}

Value Renderer::call(const Expr& e) {
  const Expr& callee = *e.children[0];
  if (callee.kind == Expr::Kind::kAttr) {
    const Value obj = eval(*callee.children[0]);
    if (obj.is_undefined()) undefined_error(obj, e.line);
    CallArgs args = call_args(e, 1);
    if (auto result = call_method(obj, callee.name, args, e.line)) return *result;
    Value fn = obj.is_dict() ? item(obj, Value::of(callee.name), e.line) : Value::undefined();
    if (fn.kind == Value::Kind::kFunction) return (*fn.function)(args, e.line);
    fail(e.line, "'" + obj.type_name() + "' object has no method '" + callee.name + "'");
  }
  const Value fn = eval(callee);
  if (fn.is_undefined()) undefined_error(fn, e.line);
  if (fn.kind != Value::Kind::kFunction)
    fail(e.line, "'" + fn.type_name() + "' object is not callable");
  CallArgs args = call_args(e, 1);
  return (*fn.function)(args, e.line);
}

Value Renderer::eval(const Expr& e) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::kLiteral:
      return e.literal;
    case K::kName:
      return lookup(e.name);
    case K::kList:
    case K::kTuple: {
      List items;
      for (const auto& c : e.children) items.push_back(eval(*c));
      return Value::of(std::move(items), e.kind == K::kTuple);
    }
    case K::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        const Value k = eval(*e.children[i]);
        if (!k.is_string()) fail(e.line, "dict keys must be strings here, got " + k.type_name());
        d.set(k.str, eval(*e.children[i + 1]));
      }
      return Value::of(std::move(d));
    }
    case K::kAttr: {
      const Value obj = eval(*e.children[0]);
      if (obj.is_undefined()) undefined_error(obj, e.line);
      return item(obj, Value::of(e.name), e.line);
    }
    case K::kItem:
      return item(eval(*e.children[0]), eval(*e.children[1]), e.line);
    case K::kSlice:
      return slice(eval(*e.children[0]), e);
    case K::kCall:
      return call(e);
    case K::kFilter: {
      const Value v = eval(*e.children[0]);
      CallArgs args = call_args(e, 1);
      return apply_filter(e.name, v, args, e.line);
    }
    case K::kTest: {
      const Value v = eval(*e.children[0]);
      CallArgs args = call_args(e, 1);
      return Value::of(apply_test(e.name, v, args, e.line) != e.negated);
    }
    case K::kNot:
      return Value::of(!eval(*e.children[0]).truthy());
    case K::kNeg:
    case K::kPos: {
      const Value v = eval(*e.children[0]);
      if (v.is_undefined()) undefined_error(v, e.line);
      if (!v.is_number())
        fail(e.line, "bad operand type for unary " + std::string(e.kind == K::kNeg ? "-" : "+") +
                         ": '" + v.type_name() + "'");
      if (e.kind == K::kPos) return v.kind == Value::Kind::kBool ? Value::of(as_int(v)) : v;
      if (v.kind == Value::Kind::kFloat) return Value::of(-v.real);
      if (as_int(v) == INT64_MIN) fail(e.line, "integer overflow in unary -");
      return Value::of(-as_int(v));
    }
    case K::kBinary:
      return binary(e.name, eval(*e.children[0]), eval(*e.children[1]), e.line);
    case K::kCompare: {
      Value left = eval(*e.children[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.children[i + 1]);
        if (!compare(e.ops[i], left, right, e.line)) return Value::of(false);
        left = std::move(right);
      }
      return Value::of(true);
    }
    case K::kAnd: {
      Value left = eval(*e.children[0]);
      return left.truthy() ? eval(*e.children[1]) : left;
    }
    case K::kOr: {
      Value left = eval(*e.children[0]);
      return left.truthy() ? left : eval(*e.children[1]);
    }
    case K::kCond:
      if (eval(*e.children[1]).truthy()) return eval(*e.children[0]);
      return e.children[2] ? eval(*e.children[2]) : Value::undefined();
  }
  return Value::undefined();
}

}  // namespace tessel::serve::jinja::detail
