// SPDX-License-Identifier: Apache-2.0
// The Jinja2 parser: tokens -> a tree of statements and expressions, with Jinja2's grammar and
// operator precedence (loosest first: "x if c else y", or, and, not, comparisons and in, + -, ~,
// * / // %, **, unary - +, then filters "|f(...)" and tests "is [not] t" on a primary with its
// .attr, [item], [a:b:c] and (call) suffixes). Statements: if/elif/else, for (with an "if"
// filter, unpacking and else), set (a name, names, ns.attr, or a block), macro, break, continue,
// generation (rendered as its body), raw.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessel/serve/jinja_value.h"

namespace tessel::serve::jinja {

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kTuple,
    kDict,    // children: key, value, key, value, ...
    kAttr,    // children[0].name
    kItem,    // children[0][children[1]]
    kSlice,   // children[0][children[1]:children[2]:children[3]] (null parts allowed)
    kCall,    // children[0](children[1..]); the last kwargs.size() are keyword arguments
    kFilter,  // children[0] | name(children[1..])
    kTest,    // children[0] is [not] name(children[1..])
    kNot,
    kNeg,
    kPos,
    kBinary,   // children[0] name children[1]; name: + - * / // % ** ~
    kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ...
    kAnd,
    kOr,
    kCond,  // children[0] if children[1] else children[2] (null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 1;
  Value literal;
  std::string name;
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::string> kwargs;  // names of the trailing keyword arguments
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kBlock };
  Kind kind = Kind::kText;
  int line = 1;
  std::string text;                          // kText
  std::unique_ptr<Expr> expr;                // kOutput, kFor (iterable), kSet (value)
  std::unique_ptr<Expr> filter;              // kFor: the "if" clause
  std::vector<std::unique_ptr<Expr>> conds;  // kIf: one per if/elif
  std::vector<Body> bodies;  // kIf: per cond, then else; kFor: body, else; others: body
  // kFor: loop variables; kSet/kSetBlock: names, or {namespace, attribute} when attr_target;
  // kMacro: name, then parameters.
  std::vector<std::string> targets;
  std::vector<std::unique_ptr<Expr>> defaults;  // kMacro: per parameter (null: none)
  bool attr_target = false;
};

struct Template {
  Body body;
};

// Throws tessel::Error ("chat template line N: ...") on a syntax error.
std::shared_ptr<const Template> parse(const std::string& source);

}  // namespace tessel::serve::jinja
