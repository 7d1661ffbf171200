// SPDX-License-Identifier: Apache-2.0
// Differential testing of tessel's Jinja2 interpreter: random templates from a small grammar of
// the constructs chat templates use, rendered by tessel and by Python's jinja2. The seed and count
// can be raised for a longer search (TESSEL_JINJA_RANDOM_SEED, TESSEL_JINJA_RANDOM_TEMPLATES).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "jinja_reference.h"
#include "tessel/core/error.h"
#include "tessel/serve/jinja_eval.h"
#include "tessel/serve/jinja_parser.h"

namespace tessel::serve {
namespace {

using test::ojson;

// Random templates built from the constructs chat templates use (a small grammar), rendered by
// tessel and by jinja2: the same text, or both raise.
class TemplateGenerator {
 public:
  explicit TemplateGenerator(uint32_t seed) : rng_(seed) {}

  std::string body(int depth) {
    std::string out;
    const int n = 1 + pick(4);
    for (int i = 0; i < n; ++i) out += statement(depth);
    return out;
  }

 private:
  int pick(int n) { return int(rng_() % uint32_t(n)); }
  template <size_t N>
  const char* one_of(const char* const (&items)[N]) {
    return items[pick(int(N))];
  }
  std::string open(const char* kind) {
    static const char* const kControls[] = {"", "", "-", "+"};
    const char* c = one_of(kControls);
    if (std::string(kind) == "{{" && std::string(c) == "+") c = "";
    return std::string(kind) + c + " ";
  }
  std::string close(const char* kind) {
    static const char* const kControls[] = {"", "", "-"};
    return std::string(" ") + one_of(kControls) + kind;
  }
  std::string text() {
    static const char* const kTexts[] = {"a",  " b ", "\n",   "  ", "\n  ", "x\n",
                                         "\t", " {x", "é\n ", "}",  "#",    "%"};
    return one_of(kTexts);
  }
  std::string atom() {
    static const char* const kAtoms[] = {"n",
                                         "f",
                                         "s",
                                         "u",
                                         "xs",
                                         "d",
                                         "empty",
                                         "flag",
                                         "missing",
                                         "ms",
                                         "0",
                                         "1",
                                         "-3",
                                         "2.5",
                                         "0.1",
                                         "1e3",
                                         "'str'",
                                         "\"q'\"",
                                         "'é✓'",
                                         "'a\\nb\\t\\u00e9\\x41'",
                                         "\"dq \\\" \\\\\"",
                                         "ns.c",
                                         "loop_var is defined",
                                         "''",
                                         "true",
                                         "false",
                                         "none",
                                         "[1, 'a']",
                                         "[]",
                                         "{'k': 'v'}",
                                         "(1, 2)",
                                         "xs[0]",
                                         "xs[-1]",
                                         "xs[1:]",
                                         "s[2:5]",
                                         "u[::-1]",
                                         "d.z",
                                         "d['a']",
                                         "d.nope",
                                         "ms[0].role",
                                         "ms[1]['content']",
                                         "ms|length",
                                         "loop_var"};
    return one_of(kAtoms);
  }
  std::string expr(int depth) {
    if (depth <= 0) return atom();
    switch (pick(8)) {
      case 0: {
        static const char* const kOps[] = {
            "+", "-", "*", "/", "//", "~", "==", "!=", "<", ">=", "and", "or", "in", "not in"};
        return expr(depth - 1) + " " + one_of(kOps) + " " + expr(depth - 1);
      }
      case 1: {
        static const char* const kFilters[] = {"trim",
                                               "upper",
                                               "lower",
                                               "length",
                                               "first",
                                               "last",
                                               "join(',')",
                                               "default('dv')",
                                               "tojson",
                                               "string",
                                               "int",
                                               "list",
                                               "capitalize",
                                               "title",
                                               "replace('a', 'b')",
                                               "d('x', true)",
                                               "float",
                                               "abs",
                                               "map(attribute='role')|list",
                                               "selectattr('role', 'equalto', 'user')|list",
                                               "tojson(indent=2)",
                                               "count"};
        return expr(depth - 1) + "|" + one_of(kFilters);
      }
      case 2: {
        static const char* const kTests[] = {
            "defined",  "undefined", "none",        "string",        "number",   "mapping",
            "iterable", "sequence",  "odd",         "even",          "integer",  "float",
            "boolean",  "not none",  "not defined", "divisibleby 3", "in [1, 2]"};
        return expr(depth - 1) + " is " + one_of(kTests);
      }
      case 3: {
        static const char* const kMethods[] = {
            ".strip()",         ".split()",       ".upper()",           ".lower()",
            ".startswith('a')", ".endswith('x')", ".items()|list",      ".get('z')",
            ".title()",         ".split(',')",    ".replace('a', 'x')", ".keys()|list"};
        return expr(depth - 1) + one_of(kMethods);
      }
      case 4:
        return expr(depth - 1) + " if " + expr(depth - 1) + " else " + expr(depth - 1);
      case 5:
        return "not " + expr(depth - 1);
      case 6:
        return "(" + expr(depth - 1) + ")";
      default:
        return "[" + expr(depth - 1) + ", " + expr(depth - 1) + "]";
    }
  }
  std::string statement(int depth) {
    switch (depth <= 0 ? pick(3) : pick(8)) {
      case 0:
        return text();
      case 1:
        return open("{{") + expr(2) + close("}}");
      case 2:
        return open("{%") + "set v" + std::to_string(pick(2)) + " = " + expr(2) + close("%}") +
               text() + open("{{") + "v0" + close("}}");
      case 3:
        return open("{%") + "if " + expr(2) + close("%}") + body(depth - 1) +
               (pick(2) ? open("{%") + "elif " + expr(1) + close("%}") + body(depth - 1) : "") +
               (pick(2) ? open("{%") + "else" + close("%}") + body(depth - 1) : "") + open("{%") +
               "endif" + close("%}");
      case 4: {
        static const char* const kIterables[] = {
            "xs",     "ms", "s", "d", "range(3)", "[]", "missing", "d.items()", "xs|reverse|list",
            "ms[1:]", "n"};
        return open("{%") + "for loop_var in " + one_of(kIterables) +
               (pick(3) == 0 ? " if loop_var" : "") + close("%}") + body(depth - 1) + open("{{") +
               "loop.index ~ loop.first ~ loop.last ~ loop.length" + close("}}") +
               (pick(3) == 0 ? open("{%") + "else" + close("%}") + body(depth - 1) : "") +
               open("{%") + "endfor" + close("%}");
      }
      case 5:
        return open("{#") + "comment" + close("#}");
      case 6:
        switch (pick(4)) {
          case 0:
            return open("{%") + "set ns = namespace(c=" + expr(1) + ")" + close("%}") +
                   body(depth - 1) + open("{%") + "set ns.c = " + expr(1) + close("%}") +
                   open("{{") + "ns.c" + close("}}");
          case 1:
            return open("{%") + "macro m(a, b='mb')" + close("%}") + body(depth - 1) + open("{{") +
                   "a ~ b" + close("}}") + open("{%") + "endmacro" + close("%}") + open("{{") +
                   "m(" + expr(1) + ") ~ m(1, b=" + expr(1) + ")" + close("}}");
          case 2:
            return open("{%") + "set v0" + close("%}") + body(depth - 1) + open("{%") + "endset" +
                   close("%}") + open("{{") + "v0|length" + close("}}");
          default:
            return open("{%") + "for k, v in d.items()" + close("%}") + open("{{") + "k ~ '=' ~ v" +
                   close("}}") + body(depth - 1) + open("{%") + "endfor" + close("%}");
        }
      default:
        return text() + open("{{") + expr(1) + close("}}") + text();
    }
  }

  std::mt19937 rng_;
};

TEST(Jinja, RandomTemplatesMatchPythonJinja2) {
  const ojson vars = {
      {"n", 7},
      {"f", 2.5},
      {"s", "  Hello, world  "},
      {"u", "naïve ünï ✓"},
      {"xs", {3, 1, 2}},
      {"d", {{"z", 1}, {"a", "x"}}},
      {"empty", ""},
      {"flag", true},
      {"ms", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", " yo "}}}},
  };
  const char* env_count = std::getenv("TESSEL_JINJA_RANDOM_TEMPLATES");
  const int count = env_count ? std::atoi(env_count) : 400;
  const char* env_seed = std::getenv("TESSEL_JINJA_RANDOM_SEED");
  TemplateGenerator gen(env_seed ? uint32_t(std::atoi(env_seed)) : 2024);
  std::vector<test::ReferenceCase> cases;
  for (int i = 0; i < count; ++i) cases.push_back({gen.body(2), vars});
  const auto want = test::jinja2_render(cases);
  ASSERT_EQ(want.size(), cases.size());
  int both_rendered = 0, mismatches = 0;
  for (size_t i = 0; i < cases.size() && mismatches < 20; ++i) {
    std::string got;
    bool ok = true;
    try {
      got = jinja::render(*jinja::parse(cases[i].source), test::to_globals(vars));
    } catch (const Error& e) {
      ok = false;
      got = e.what();
    }
    const bool same = ok == want[i].ok && (!ok || got == want[i].text);
    mismatches += !same;
    both_rendered += ok && want[i].ok;
    EXPECT_TRUE(same) << "template " << i << ":\n"
                      << cases[i].source << "\n tessel (" << (ok ? "ok" : "error") << "): " << got
                      << "\n jinja2 (" << (want[i].ok ? "ok" : "error")
                      << "): " << (want[i].ok ? want[i].text : want[i].error);
  }
  EXPECT_GT(both_rendered, count / 4);
}

}  // namespace
}  // namespace tessel::serve
