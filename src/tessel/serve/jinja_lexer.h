// SPDX-License-Identifier: Apache-2.0
// The Jinja2 lexer: template text -> a flat token stream (text runs, {{ }} and {% %} delimiters,
// and the names, literals and operators inside them), applying the whitespace rules of the
// environment chat templates are rendered in: newlines normalised to \n and one trailing newline
// dropped, comments removed, "-" on a delimiter stripping the whitespace on that side,
// trim_blocks (the newline after a block or comment tag is dropped) and lstrip_blocks (spaces and
// tabs from the start of a line up to a block or comment tag are dropped; "+" turns either off).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::serve::jinja {

enum class TokenType {
  kText,
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text: the unescaped value
  kInt,
  kFloat,
  kOp,  // text: the operator ("+", "//", "==", "(", ...)
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int line = 1;
  int64_t integer = 0;
  double real = 0;
};

// Throws tessel::Error ("chat template line N: ...") on an unclosed tag, string or comment or a
// character that is no token.
std::vector<Token> tokenize(const std::string& source);

}  // namespace tessel::serve::jinja
