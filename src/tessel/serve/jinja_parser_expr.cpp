// SPDX-License-Identifier: Apache-2.0
// Expressions of the Jinja2 parser, one function per precedence level as in Jinja2's own parser
// (so "a + b | f" filters b, "x is defined and y" tests x, "not a in b" negates the membership).
#include "tessel/serve/jinja_parser_impl.h"

namespace tessel::serve::jinja::detail {

ExprPtr Parser::parse_tuple(bool condexpr) {
  const int line = cur().line;
  ExprPtr first = parse_expression(condexpr);
  if (!is_op(",")) return first;
  auto t = node(Expr::Kind::kTuple, line);
  t->children.push_back(std::move(first));
  while (accept_op(",")) {
    if (cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || is_op(")") ||
        is_name("if") || is_name("in")) {
      break;
    }
    t->children.push_back(parse_expression(condexpr));
  }
  return t;
}

ExprPtr Parser::parse_expression(bool condexpr) {
  DepthGuard guard(*this);
  ExprPtr e = parse_or();
  while (condexpr && is_name("if")) {
    const int line = next().line;
    auto c = node(Expr::Kind::kCond, line);
    ExprPtr cond = parse_or();
    ExprPtr other = nullptr;
    if (is_name("else")) {
      next();
      other = parse_expression(true);
    }
    c->children.push_back(std::move(e));
    c->children.push_back(std::move(cond));
    c->children.push_back(std::move(other));
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::binary_chain(Expr::Kind kind, const char* word, ExprPtr (Parser::*operand)()) {
  ExprPtr left = (this->*operand)();
  while (is_name(word)) {
    auto b = node(kind, next().line);
    b->children.push_back(std::move(left));
    b->children.push_back((this->*operand)());
    left = std::move(b);
  }
  return left;
}
ExprPtr Parser::parse_or() {
  return binary_chain(Expr::Kind::kOr, "or", &Parser::parse_and);
}
ExprPtr Parser::parse_and() {
  return binary_chain(Expr::Kind::kAnd, "and", &Parser::parse_not);
}
ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    auto n = node(Expr::Kind::kNot, next().line);
    n->children.push_back(parse_not());
    return n;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  auto c = node(Expr::Kind::kCompare, line);
  c->children.push_back(std::move(first));
  while (true) {
    std::string op;
    if (cur().type == TokenType::kOp &&
        (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
      next();
      next();
      op = "not in";
    } else {
      break;
    }
    c->ops.push_back(op);
    c->children.push_back(parse_math1());
  }
  if (c->ops.empty()) return std::move(c->children[0]);
  return c;
}

ExprPtr Parser::binary_ops(std::initializer_list<const char*> ops, ExprPtr (Parser::*operand)()) {
  ExprPtr left = (this->*operand)();
  while (true) {
    const char* found = nullptr;
    for (const char* op : ops) {
      if (is_op(op)) found = op;
    }
    if (!found) return left;
    auto b = node(Expr::Kind::kBinary, next().line);
    b->name = found;
    b->children.push_back(std::move(left));
    b->children.push_back((this->*operand)());
    left = std::move(b);
  }
}
ExprPtr Parser::parse_math1() {
  return binary_ops({"+", "-"}, &Parser::parse_concat);
}
ExprPtr Parser::parse_concat() {
  return binary_ops({"~"}, &Parser::parse_math2);
}
ExprPtr Parser::parse_math2() {
  return binary_ops({"*", "/", "//", "%"}, &Parser::parse_pow);
}
ExprPtr Parser::parse_pow() {
  return binary_ops({"**"}, &Parser::parse_unary_filtered);
}
ExprPtr Parser::parse_unary_filtered() {
  return parse_unary(true);
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const bool neg = cur().text == "-";
    e = node(neg ? Expr::Kind::kNeg : Expr::Kind::kPos, next().line);
    e->children.push_back(parse_unary(false));
  } else {
    e = parse_postfix(parse_primary());
  }
  if (with_filter) e = parse_filters(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  const int line = t.line;
  auto lit = [&](Value v) {
    auto e = node(Expr::Kind::kLiteral, line);
    e->literal = std::move(v);
    return e;
  };
  switch (t.type) {
    case TokenType::kName: {
      const std::string name = next().text;
      if (name == "true" || name == "True") return lit(Value::of(true));
      if (name == "false" || name == "False") return lit(Value::of(false));
      if (name == "none" || name == "None") return lit(Value::none());
      auto e = node(Expr::Kind::kName, line);
      e->name = name;
      return e;
    }
    case TokenType::kString: {
      std::string s = next().text;
      while (cur().type == TokenType::kString) s += next().text;
      return lit(Value::of(std::move(s)));
    }
    case TokenType::kInt:
      return lit(Value::of(next().integer));
    case TokenType::kFloat:
      return lit(Value::of(next().real));
    case TokenType::kOp:
      if (accept_op("(")) {
        if (accept_op(")")) return tuple_of({}, line);
        ExprPtr inner = parse_expression(true);
        if (is_op(",")) {
          std::vector<ExprPtr> items;
          items.push_back(std::move(inner));
          while (accept_op(",") && !is_op(")")) items.push_back(parse_expression(true));
          expect_op(")");
          return tuple_of(std::move(items), line);
        }
        expect_op(")");
        return inner;
      }
      if (accept_op("[")) {
        auto e = node(Expr::Kind::kList, line);
        while (!is_op("]")) {
          if (!e->children.empty()) expect_op(",");
          if (is_op("]")) break;
          e->children.push_back(parse_expression(true));
        }
        expect_op("]");
        return e;
      }
      if (accept_op("{")) {
        auto e = node(Expr::Kind::kDict, line);
        while (!is_op("}")) {
          if (!e->children.empty()) expect_op(",");
          if (is_op("}")) break;
          e->children.push_back(parse_expression(true));
          expect_op(":");
          e->children.push_back(parse_expression(true));
        }
        expect_op("}");
        return e;
      }
      break;
    default:
      break;
  }
  fail(line, "unexpected " + describe(t) + " in an expression");
}

ExprPtr Parser::tuple_of(std::vector<ExprPtr> items, int line) {
  auto e = node(Expr::Kind::kTuple, line);
  e->children = std::move(items);
  return e;
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    const int line = cur().line;
    if (accept_op(".")) {
      auto a = node(Expr::Kind::kAttr, line);
      if (cur().type == TokenType::kInt) {
        a->kind = Expr::Kind::kItem;
        a->children.push_back(std::move(e));
        auto idx = node(Expr::Kind::kLiteral, line);
        idx->literal = Value::of(next().integer);
        a->children.push_back(std::move(idx));
      } else {
        a->name = expect_name();
        a->children.push_back(std::move(e));
      }
      e = std::move(a);
    } else if (accept_op("[")) {
      e = parse_subscript(std::move(e), line);
    } else if (is_op("(")) {
      e = parse_call(std::move(e), Expr::Kind::kCall, "");
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr obj, int line) {
  ExprPtr parts[3];
  int part = 0;
  bool slice = false;
  while (!is_op("]")) {
    if (accept_op(":")) {
      slice = true;
      if (++part > 2) fail(line, "a slice has at most three parts");
      continue;
    }
    if (parts[part]) fail(cur().line, "expected ':' or ']', got " + describe(cur()));
    parts[part] = parse_expression(true);
    if (part == 0 && is_op(",")) {  // x[a, b]: a tuple key
      std::vector<ExprPtr> items;
      items.push_back(std::move(parts[0]));
      while (accept_op(",") && !is_op("]")) items.push_back(parse_expression(true));
      parts[0] = tuple_of(std::move(items), line);
      if (!is_op("]")) fail(cur().line, "expected ']', got " + describe(cur()));
    }
  }
  expect_op("]");
  if (!slice && !parts[0]) parts[0] = tuple_of({}, line);  // x[] is x[()], as in Jinja2
  auto e = node(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, line);
  e->children.push_back(std::move(obj));
  e->children.push_back(std::move(parts[0]));
  if (slice) {
    e->children.push_back(std::move(parts[1]));
    e->children.push_back(std::move(parts[2]));
  }
  return e;
}

// "(args, name=value)" after a callee, filter or test; `first` is children[0].
ExprPtr Parser::parse_call(ExprPtr first, Expr::Kind kind, std::string name) {
  auto e = node(kind, cur().line);
  e->name = std::move(name);
  e->children.push_back(std::move(first));
  expect_op("(");
  bool any = false;
  while (!is_op(")")) {
    if (any) expect_op(",");
    if (is_op(")")) break;
    any = true;
    if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().text == "=") {
      e->kwargs.push_back(next().text);
      next();
      e->children.push_back(parse_expression(true));
    } else {
      if (!e->kwargs.empty()) fail(cur().line, "a positional argument follows a keyword argument");
      e->children.push_back(parse_expression(true));
    }
  }
  expect_op(")");
  return e;
}

ExprPtr Parser::parse_filters(ExprPtr e) {
  while (true) {
    const int line = cur().line;
    if (accept_op("|")) {
      std::string name = expect_name();
      while (accept_op(".")) name += "." + expect_name();
      if (is_op("(")) {
        e = parse_call(std::move(e), Expr::Kind::kFilter, name);
      } else {
        auto f = node(Expr::Kind::kFilter, line);
        f->name = name;
        f->children.push_back(std::move(e));
        e = std::move(f);
      }
    } else if (is_name("is")) {
      next();
      const bool negated = is_name("not") ? (next(), true) : false;
      std::string name = expect_name();
      while (accept_op(".")) name += "." + expect_name();
      ExprPtr t;
      if (is_op("(")) {
        t = parse_call(std::move(e), Expr::Kind::kTest, name);
      } else {
        t = node(Expr::Kind::kTest, line);
        t->name = name;
        t->children.push_back(std::move(e));
        const bool arg = (cur().type == TokenType::kName || cur().type == TokenType::kString ||
                          cur().type == TokenType::kInt || cur().type == TokenType::kFloat ||
                          is_op("[") || is_op("{")) &&
                         !is_name("else") && !is_name("or") && !is_name("and");
        if (is_name("is")) fail(cur().line, "tests cannot be chained with 'is'");
        if (arg) t->children.push_back(parse_postfix(parse_primary()));
      }
      t->negated = negated;
      e = std::move(t);
    } else if (is_op("(")) {
      e = parse_call(std::move(e), Expr::Kind::kCall, "");
    } else {
      return e;
    }
  }
}

}  // namespace tessel::serve::jinja::detail
