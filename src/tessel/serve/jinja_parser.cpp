// SPDX-License-Identifier: Apache-2.0
// Recursive-descent parser for the Jinja2 subset: statements and the template (grammar in
// jinja_parser.h; expressions in jinja_parser_expr.cpp).
#include "tessel/serve/jinja_parser.h"

#include "tessel/serve/jinja_builtins.h"
#include "tessel/serve/jinja_parser_impl.h"

namespace tessel::serve::jinja::detail {

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kText:
      return "text";
    case TokenType::kVarBegin:
      return "'{{'";
    case TokenType::kVarEnd:
      return "'}}'";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "'%}'";
    case TokenType::kString:
      return "a string";
    case TokenType::kEof:
      return "the end of the template";
    default:
      return "'" + t.text + "'";
  }
}

// Statements until a block tag named in `stops` (its name consumed, left in *stop) or the end.
Body Parser::parse_body(const std::vector<std::string>& stops, std::string* stop) {
  DepthGuard guard(*this);
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == TokenType::kEof) {
      if (!stops.empty())
        fail(t.line, "unexpected end of template: '" + stops.back() + "' missing");
      return body;
    }
    if (t.type == TokenType::kText) {
      auto s = std::make_unique<Stmt>();
      s->line = t.line;
      s->text = next().text;
      body.push_back(std::move(s));
    } else if (t.type == TokenType::kVarBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->line = next().line;
      s->expr = parse_tuple(true);
      expect(TokenType::kVarEnd, "'}}'");
      body.push_back(std::move(s));
    } else if (t.type == TokenType::kBlockBegin) {
      const Token& name = peek();
      if (name.type == TokenType::kName &&
          std::find(stops.begin(), stops.end(), name.text) != stops.end()) {
        next();
        *stop = next().text;
        return body;
      }
      next();
      body.push_back(parse_statement());
    } else {
      fail(t.line, "unexpected " + describe(t));
    }
  }
}

std::unique_ptr<Stmt> Parser::parse_statement() {
  auto s = std::make_unique<Stmt>();
  s->line = cur().line;
  const std::string name = expect_name();
  std::string stop;
  if (name == "if") {
    s->kind = Stmt::Kind::kIf;
    s->conds.push_back(parse_tuple(false));
    while (true) {
      expect(TokenType::kBlockEnd, "'%}'");
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, &stop));
      if (stop == "elif") {
        s->conds.push_back(parse_tuple(false));
      } else if (stop == "else") {
        expect(TokenType::kBlockEnd, "'%}'");
        s->bodies.push_back(parse_body({"endif"}, &stop));
        break;
      } else {
        break;
      }
    }
  } else if (name == "for") {
    s->kind = Stmt::Kind::kFor;
    s->targets = parse_targets();
    if (!is_name("in")) fail(cur().line, "expected 'in' in a for loop, got " + describe(cur()));
    next();
    s->expr = parse_tuple(false);
    if (is_name("if")) {
      next();
      s->filter = parse_expression(true);
    }
    if (is_name("recursive")) fail(cur().line, "recursive for loops are not supported");
    expect(TokenType::kBlockEnd, "'%}'");
    ++loop_depth_;
    s->bodies.push_back(parse_body({"endfor", "else"}, &stop));
    --loop_depth_;
    if (stop == "else") {
      expect(TokenType::kBlockEnd, "'%}'");
      s->bodies.push_back(parse_body({"endfor"}, &stop));
    }
  } else if (name == "set") {
    s->kind = Stmt::Kind::kSet;
    if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().text == ".") {
      s->targets.push_back(next().text);
      next();
      s->targets.push_back(expect_name());
      s->attr_target = true;
    } else {
      s->targets = parse_targets();
    }
    if (accept_op("=")) {
      s->expr = parse_tuple(true);
    } else {
      if (s->attr_target || s->targets.size() != 1) fail(s->line, "a set block takes one name");
      s->kind = Stmt::Kind::kSetBlock;
      expect(TokenType::kBlockEnd, "'%}'");
      s->bodies.push_back(parse_body({"endset"}, &stop));
    }
  } else if (name == "macro") {
    s->kind = Stmt::Kind::kMacro;
    s->targets.push_back(expect_name());
    expect_op("(");
    while (!is_op(")")) {
      if (s->targets.size() > 1) expect_op(",");
      if (is_op(")")) break;
      s->targets.push_back(expect_name());
      s->defaults.push_back(accept_op("=") ? parse_expression(true) : nullptr);
    }
    expect_op(")");
    expect(TokenType::kBlockEnd, "'%}'");
    const int outer_loops = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(parse_body({"endmacro"}, &stop));
    loop_depth_ = outer_loops;
  } else if (name == "break" || name == "continue") {
    s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    if (loop_depth_ == 0) fail(s->line, "'" + name + "' outside a for loop");
  } else if (name == "generation") {
    s->kind = Stmt::Kind::kBlock;
    expect(TokenType::kBlockEnd, "'%}'");
    s->bodies.push_back(parse_body({"endgeneration"}, &stop));
  } else {
    fail(s->line, "unknown or unexpected tag '" + name + "'");
  }
  expect(TokenType::kBlockEnd, "'%}'");
  return s;
}

// "x", "a, b", "(a, b)".
std::vector<std::string> Parser::parse_targets() {
  std::vector<std::string> names;
  const bool paren = accept_op("(");
  do {
    names.push_back(expect_name());
  } while (accept_op(","));
  if (paren) expect_op(")");
  return names;
}

namespace {

// Unknown filters and tests are refused when the template is loaded, except inside an if block
// or a conditional expression, where Jinja2 defers the error to when (if ever) they run.
void check_names(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == Expr::Kind::kCond) soft = true;
  if (!soft && e->kind == Expr::Kind::kFilter && !is_filter(e->name)) {
    fail(e->line, "no filter named '" + e->name + "'");
  }
  if (!soft && e->kind == Expr::Kind::kTest && !is_test(e->name)) {
    fail(e->line, "no test named '" + e->name + "'");
  }
  for (const auto& c : e->children) check_names(c.get(), soft);
}

void check_names(const Body& body, bool soft) {
  for (const auto& s : body) {
    check_names(s->expr.get(), soft);
    const bool inner_soft = s->kind == Stmt::Kind::kIf || (soft && s->kind == Stmt::Kind::kBlock);
    for (const auto& c : s->conds) check_names(c.get(), true);
    check_names(s->filter.get(), false);
    for (const auto& d : s->defaults) check_names(d.get(), false);
    for (const auto& b : s->bodies) check_names(b, inner_soft);
  }
}

}  // namespace

}  // namespace tessel::serve::jinja::detail

namespace tessel::serve::jinja {

std::shared_ptr<const Template> parse(const std::string& source) {
  auto t = std::make_shared<Template>();
  t->body = detail::Parser(tokenize(source)).parse_template();
  detail::check_names(t->body, false);
  return t;
}

}  // namespace tessel::serve::jinja
