// SPDX-License-Identifier: Apache-2.0
// The Jinja2 parser's state, shared by its statement (jinja_parser.cpp) and expression
// (jinja_parser_expr.cpp) halves: the token stream, a cursor, and the nesting depth that bounds
// recursion on hostile input.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tessel/serve/jinja_lexer.h"
#include "tessel/serve/jinja_parser.h"

namespace tessel::serve::jinja::detail {

inline constexpr int kMaxParseDepth = 200;  // nesting of expressions and blocks

using ExprPtr = std::unique_ptr<Expr>;

// How a token reads in an error message.
std::string describe(const Token& t);

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_template() {
    std::string stop;
    Body body = parse_body({}, &stop);
    return body;
  }

 private:
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  Token next() {
    Token t = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOp && cur().text == op; }
  bool is_name(const char* name) const {
    return cur().type == TokenType::kName && cur().text == name;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op))
      fail(cur().line, "expected '" + std::string(op) + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail(cur().line, "expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect(TokenType type, const char* what) {
    if (cur().type != type)
      fail(cur().line, std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) fail(p_.cur().line, "the template is nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };
  ExprPtr node(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  Body parse_body(const std::vector<std::string>& stops, std::string* stop);
  std::unique_ptr<Stmt> parse_statement();
  std::vector<std::string> parse_targets();
  ExprPtr parse_tuple(bool condexpr);
  ExprPtr parse_expression(bool condexpr = true);
  ExprPtr binary_chain(Expr::Kind kind, const char* word, ExprPtr (Parser::*operand)());
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr binary_ops(std::initializer_list<const char*> ops, ExprPtr (Parser::*operand)());
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary_filtered();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr tuple_of(std::vector<ExprPtr> items, int line);
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj, int line);
  ExprPtr parse_call(ExprPtr first, Expr::Kind kind, std::string name);
  ExprPtr parse_filters(ExprPtr e);

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace tessel::serve::jinja::detail
