// SPDX-License-Identifier: Apache-2.0
// tessel's Jinja2 interpreter: each construct on its own, the same templates against Python's
// jinja2 byte for byte (in transformers' environment), errors with their line, and malformed
// templates that must fail cleanly.
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

std::string render(const std::string& source, const ojson& vars = ojson::object()) {
  return jinja::render(*jinja::parse(source), test::to_globals(vars));
}

// The message of the Error rendering `source` throws ("" and a test failure when none).
std::string render_error(const std::string& source, const ojson& vars = ojson::object()) {
  try {
    const std::string out = render(source, vars);
    ADD_FAILURE() << "rendered without an error: '" << out << "' from " << source;
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Jinja, TextAndOutput) {
  EXPECT_EQ(render("hello"), "hello");
  EXPECT_EQ(render("a{{ 1 + 2 }}b{{ 'x' ~ 3 }}"), "a3bx3");
  EXPECT_EQ(render("{# a comment #}x"), "x");
  EXPECT_EQ(render("{{ none }}|{{ true }}|{{ 1.0 }}|{{ [1, 'a'] }}|{{ undefined_name }}|"),
            "None|True|1.0|[1, 'a']||");
  EXPECT_EQ(render("x\n"), "x");  // one trailing newline is dropped
  EXPECT_EQ(render("x\r\ny"), "x\ny");
}

TEST(Jinja, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one.
  EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(render("x  {%- if true -%}  y  {%- endif %}"), "xy");
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{{ 'a' }}  {% if true %}b{% endif %}"), "a  b");  // not at a line start
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(Jinja, Conditionals) {
  const char* t = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, {{"n", 1}}), "one");
  EXPECT_EQ(render(t, {{"n", 2}}), "two");
  EXPECT_EQ(render(t, {{"n", 7}}), "many");
  EXPECT_EQ(render("{{ 'y' if x else 'n' }}{{ 'z' if false }}", {{"x", ""}}), "n");
}

TEST(Jinja, Loops) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ x }}{% if not loop.last "
                   "%},{% endif %}{% endfor %}",
                   {{"xs", {"a", "b"}}}),
            "10a,21b");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"),
            "2/2 4/2 ");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"a", 1}, {"b", 2}}}}),
            "a=1;b=2;");
  EXPECT_EQ(render("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 "
                   "%}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "02");
  // A set inside a loop lasts one iteration; a namespace carries state out.
  EXPECT_EQ(render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in [1, 2] %}{% set n = "
                   "n + x %}{% set ns.n = ns.n + x %}{% endfor %}{{ n }} {{ ns.n }}"),
            "0 3");
}

TEST(Jinja, ExpressionsFollowPython) {
  EXPECT_EQ(
      render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }}"),
      "3 -4 2 3.5 1024 7");
  EXPECT_EQ(render("{{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'a' in 'cat' }} {{ 2 not in [1] }}"),
            "ababab [1, 2] True True");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' > 'a' }}"), "True False True");
  EXPECT_EQ(render("{{ x or 'd' }} {{ 0 and 1 }} {{ not x }}", {{"x", ""}}), "d 0 True");
  EXPECT_EQ(render("{{ m['role'] }} {{ m.role }} {{ xs[-1] }} {{ xs[1:] }} {{ 'héllo'[1:3] }}",
                   {{"m", {{"role", "user"}}}, {"xs", {1, 2, 3}}}),
            "user user 3 [2, 3] él");
  EXPECT_EQ(render("{{ {'a': [1, {'b': none}]} }}"), "{'a': [1, {'b': None}]}");
}

TEST(Jinja, FiltersTestsAndMethods) {
  EXPECT_EQ(render("{{ '  x '|trim }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}|{{ [1,2]|length }}"),
            "x|ABab|2");
  EXPECT_EQ(render("{{ [1,2,3]|join(', ') }}|{{ xs|first }}{{ xs|last }}|{{ u|default('d') }}",
                   {{"xs", {"a", "b"}}}),
            "1, 2, 3|ab|d");
  EXPECT_EQ(render("{{ x|tojson }}", {{"x", {{"k", "é\"\n"}, {"n", {1, 2.5, nullptr}}}}}),
            "{\"k\": \"é\\\"\\n\", \"n\": [1, 2.5, null]}");
  EXPECT_EQ(render("{{ ' a b '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'ab'.startswith('a') }}"),
            "a b|['a', 'b']|True");
  EXPECT_EQ(render("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}"
                   "{{ {} is mapping }}{{ 3 is odd }}{{ 'a' is not string }}",
                   {{"x", 1}}),
            "TrueTrueTrueTrueTrueTrueFalse");
  EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|join }}",
                   {{"ms", {{{"role", "user"}, {"c", "a"}}, {{"role", "x"}, {"c", "b"}}}}}),
            "a");
}

TEST(Jinja, Macros) {
  EXPECT_EQ(render("{% macro tag(name, v='d') %}<{{ name }}:{{ v }}>{% endmacro %}{{ tag('a') }}{{ "
                   "tag('b', v=1) }}"),
            "<a:d><b:1>");
}

TEST(Jinja, ErrorsNameTheLine) {
  EXPECT_NE(render_error("a\nb\n{% if x %}").find("line 3"), std::string::npos);
  EXPECT_NE(render_error("{{ 1 + }}").find("line 1"), std::string::npos);
  EXPECT_NE(render_error("x\n{% endfor %}").find("line 2"), std::string::npos);
  EXPECT_NE(render_error("{% for x in y %}\n{{ x.a.b }}{% endfor %}", {{"y", {1}}}).find("line 2"),
            std::string::npos);
  const std::string rejected = render_error("\n\n{{ raise_exception('roles must alternate') }}");
  EXPECT_NE(rejected.find("line 3"), std::string::npos) << rejected;
  EXPECT_NE(rejected.find("roles must alternate"), std::string::npos) << rejected;
  EXPECT_NE(render_error("{{ missing.attr }}").find("'missing' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(render_error("{{ x|nosuchfilter }}").find("nosuchfilter"), std::string::npos);
  EXPECT_NE(render_error("{% set xs = [] %}{{ xs.append(1) }}").find("cannot be modified"),
            std::string::npos);
}

// Every construct above and more, against jinja2 byte for byte.
TEST(Jinja, MatchesPythonJinja2) {
  const ojson vars = {
      {"s", "  Hello, World  "},
      {"u", "héllo wörld — ünïcode ✓ 🙂"},
      {"n", 7},
      {"f", 2.5},
      {"xs", {3, 1, 2}},
      {"words", {"alpha", "beta", "gamma"}},
      {"d", {{"z", 1}, {"a", {"x", "y"}}, {"m", nullptr}}},
      {"ms",
       {{{"role", "system"}, {"content", "sys"}},
        {{"role", "user"}, {"content", "hi {{ there }} {% x %} 'q' \"dq\""}},
        {{"role", "assistant"}, {"content", " answer \n"}}}},
      {"empty", ""},
      {"flag", true},
  };
  const std::vector<std::string> sources = {
      "{{ s }}|{{ s|trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' H') }}",
      "{{ u|upper }}|{{ u|lower }}|{{ u|length }}|{{ u[1] }}|{{ u[-1] }}|{{ u[2:9:2] }}|{{ u[::-1] "
      "}}",
      "{{ u.title() }}|{{ u|title }}|{{ u|capitalize }}|{{ s.split(',') }}|{{ s.split() }}",
      "{{ n / 2 }} {{ n // 2 }} {{ n % 3 }} {{ -n // 2 }} {{ -n % 3 }} {{ n ** 2 }} {{ f * 2 }} {{ "
      "f // 1 }} {{ -f % 2 }}",
      "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 1.5e16 }} {{ 123456.789 }} {{ 1/3 }} {{ 10/5 }} {{ "
      "-0.0 }}",
      "{{ xs }} {{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::2] }} {{ xs|length }} "
      "{{ xs|first }} {{ xs|last }}",
      "{{ d }} {{ d.z }} {{ d['a'] }} {{ d.m }} {{ d.nope }}|{{ d|length }} {{ d|items|list }}",
      "{% for k, v in d.items() %}{{ loop.index }}:{{ k }}={{ v }}{{ ',' if not loop.last }}{% "
      "endfor %}",
      "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'abc' %}{{ c }}-{% endfor %}",
      "{% for w in words %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ "
      "loop.revindex }}{% endfor %}",
      "{% for w in words if w != 'beta' %}{{ w }}{{ loop.length }}{% else %}none{% endfor %}",
      "{% for w in [] %}{{ w }}{% else %}none{% endfor %}",
      "{% set ns = namespace(found=false, count=0) %}{% for m in ms %}{% if m.role == 'user' %}{% "
      "set ns.found = true %}{% endif %}{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.found "
      "}} {{ ns.count }}",
      "{% set x = 1 %}{% for i in xs %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
      "{% if ms[0]['role'] == 'system' %}{% set sys = ms[0]['content'] %}{% set rest = ms[1:] %}{% "
      "else %}{% set rest = ms %}{% endif %}{{ sys }}|{{ rest|length }}",
      "{{ ms|selectattr('role', 'equalto', 'user')|list|length }} {{ ms|rejectattr('role', "
      "'equalto', 'user')|map(attribute='role')|join(',') }}",
      "{{ ms|map(attribute='content')|join('|') }}",
      "{{ d|tojson }} {{ ms|tojson }} {{ u|tojson }} {{ xs|tojson(indent=2) }} {{ "
      "d|tojson(sort_keys=true) }}",
      "{{ none|tojson }} {{ true|tojson }} {{ f|tojson }} {{ {'a': {'b': []}}|tojson(indent=4) }}",
      "{{ x is defined }} {{ n is defined }} {{ x is undefined }} {{ none is none }} {{ n is "
      "number }} {{ n is integer }} {{ f is float }} {{ s is string }}",
      "{{ d is mapping }} {{ xs is iterable }} {{ xs is sequence }} {{ s is sequence }} {{ n is "
      "odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ flag is true }} {{ x is iterable }}",
      "{{ n is not none }} {{ not n is none }} {{ (n is none) or flag }} {{ s is not string }}",
      "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 1 in xs }} {{ 'z' in d }} {{ 'q' in d }} {{ "
      "'a' in x }}",
      "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ "
      "true == 1 }} {{ x == y }} {{ none == none }}",
      "{{ n and 'yes' }} {{ empty or 'fallback' }} {{ empty and 'never' }} {{ not empty }} {{ n or "
      "x }}",
      "{{ 'a' if flag else 'b' }} {{ 'a' if empty else 'b' }} {{ 'c' if empty }}|{{ 1 if flag else "
      "2 if n else 3 }}",
      "{{ 'a' ~ n ~ none ~ flag ~ x }} {{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ 'ab' * 2 }} {{ 2 * "
      "[0] }}",
      "{{ x|default('dflt') }} {{ empty|default('dflt') }} {{ empty|default('dflt', true) }} {{ "
      "x|d('z') }}",
      "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '2.5'|float "
      "}} {{ n|string }}{{ n|string|length }}",
      "{{ 'a-b c'|replace('-', '+') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'|replace('', '.') "
      "}}",
      "{{ words|join }} {{ words|join(', ') }} {{ xs|join('-') }} {{ words|reverse|list }} {{ "
      "'abc'|reverse }}",
      "{{ s.startswith('  H') }} {{ s.endswith(('x', '  ')) }} {{ u.upper() }} {{ u.lower() }} {{ "
      "'a b'.title() }}",
      "{{ d.get('z') }} {{ d.get('q') }} {{ d.get('q', 5) }} {{ d.keys()|list }} {{ "
      "d.values()|list }}",
      "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }} {{ 'it''s' }} {{ \"a'b\" }} {{ 'a\"b' }} "
      "{{ 'a\\nb' }}",
      "{{ '\\u00e9\\x41\\t' }}|{{ 'tab\\there' }}|{{ \"q\\\"q\" }}",
      "{% macro greet(who, p='!') %}Hi {{ who }}{{ p }}{% endmacro %}{{ greet('a') }} {{ "
      "greet('b', p='?') }} {{ greet(who='c') }}",
      "{% set block %}inner {{ n }}{% endset %}[{{ block }}]",
      "{% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(1, 10, 3) %}{{ i }}{% endfor "
      "%} {{ range(3)|list }}",
      "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break "
      "%}{% endif %}{{ i }}{% endfor %}",
      "{{ abc.def }}",
      "{{ xs[10] }}|{{ d['nope'] }}|{{ d.nope.deeper }}",
      "{{ 1 + 'a' }}",
      "{{ n / 0 }}",
      "{% for x in n %}{% endfor %}",
      "{{ raise_exception('custom message ' ~ n) }}",
      "  {% if flag %}\n    text\n  {% endif %}\n  {# comment #}\n  line\n  {%- if flag -%}\n  x  "
      "\n  {%- endif %}\n{{ n }}  {% if flag %}y{% endif %}\n\n",
      "{%- for m in ms -%}\n  <{{ m.role }}>\n  {{- m.content -}}\n  </{{ m.role }}>\n{% endfor "
      "-%}\n",
      "a\n{% if flag %}\nb\n{% endif %}\nc\n{# c #}\nd\n{%+ if flag %}e{% endif %}\n  {%+ if flag "
      "%}f{% endif %}\n",
      "{{ 'x' }}\n{{ 'y' }}\n\n{%- if flag %} z{% endif %}\r\n{{ 'w' -}}\n\n  v\n",
      "{% if flag %}{% if n > 5 %}{% for w in words %}{% if loop.first %}[{% endif %}{{ w }}{% if "
      "loop.last %}]{% endif %}{% endfor %}{% endif %}{% endif %}",
      "{% set a, b = [1, 2] %}{{ a }}{{ b }} {% set t = (1, 'x') %}{{ t[1] }}",
      "{{ u|length }} {{ u|list|length }} {{ u[0:5] }} {{ u.split(' ') }}",
      "{{ '%s' }} {{ '{{' }} {{ '}}' }} {{ '{%' }} {{ {'a': {'b': 1}} }}",
      "{{ [1, 2, 3] | join(', ') | length }} {{ -n | abs }} {{ -1 ** 2 }} {{ (-1) ** 2 }} {{ 2 ** "
      "-1 }}",
      "{{ ms[0].content|upper }} {{ ms[-1]['content']|trim|capitalize }} {{ ms|length > 2 }}",
  };
  std::vector<test::ReferenceCase> cases;
  for (const auto& s : sources) cases.push_back({s, vars});
  const auto want = test::jinja2_render(cases);
  ASSERT_EQ(want.size(), cases.size());
  int rendered = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    rendered += want[i].ok;
    std::string got;
    bool ok = true;
    try {
      got = render(sources[i], vars);
    } catch (const Error& e) {
      ok = false;
      got = e.what();
    }
    EXPECT_EQ(ok, want[i].ok) << "template " << i << ": " << sources[i] << "\n tessel: " << got
                              << "\n jinja2: " << (want[i].ok ? want[i].text : want[i].error);
    if (ok && want[i].ok) {
      EXPECT_EQ(got, want[i].text) << "template " << i << ": " << sources[i];
    }
  }
  EXPECT_GE(rendered, int(sources.size()) - 8);  // the oracle ran; only the error cases raised
}

// Malformed templates: cut, spliced and shuffled pieces of real ones never crash or hang; they
// fail with an Error or render.
TEST(Jinja, MalformedTemplatesFailCleanly) {
  const std::vector<std::string> pieces = {
      "{%",         "%}",
      "{{",         "}}",
      "{#",         "#}",
      "-",          "+",
      "if",         "elif",
      "else",       "endif",
      "for",        "in",
      "endfor",     "set",
      "endset",     "macro",
      "endmacro",   "x",
      "ns.x",       "=",
      "==",         "(",
      ")",          "[",
      "]",          "{",
      "}",          ":",
      ",",          "'",
      "\"",         "|",
      "trim",       "is",
      "not",        "defined",
      "and",        "or",
      "1",          "0.5",
      "loop.index", "messages",
      "[0]",        "raise_exception",
      "namespace",  "range(3)",
      " ",          "\n",
      "\\",         "~",
      "*",          "**",
      "//",         "%",
      ".",          "break",
      "continue",   "raw",
      "endraw",     "\xff",
      "é",
  };
  const ojson vars = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"x", 1}};
  std::mt19937 rng(1234);
  int errors = 0, rendered = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string source;
    const int n = 1 + int(rng() % 24);
    for (int i = 0; i < n; ++i) source += pieces[rng() % pieces.size()];
    try {
      render(source, vars);
      ++rendered;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(rendered, 0);
  // Deep nesting and runaway loops stop at the limits with an Error.
  EXPECT_THROW(render("{{" + std::string(5000, '(') + "1" + std::string(5000, ')') + "}}"), Error);
  EXPECT_THROW(render("{{" + std::string(3000, '[') + "}}"), Error);
  EXPECT_THROW(render(std::string(3000, ' ') +
                      [] {
                        std::string s;
                        for (int i = 0; i < 1000; ++i) s += "{% if 1 %}";
                        return s;
                      }()),
               Error);
  EXPECT_THROW(render("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% "
                      "endfor %}"),
               Error);
  EXPECT_THROW(render("{{ 'x' * 100000000 }}"), Error);
  EXPECT_THROW(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), Error);
}

}  // namespace
}  // namespace tessel::serve
