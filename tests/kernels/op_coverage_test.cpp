// SPDX-License-Identifier: Apache-2.0
// Every kernels::Op has at least one case in the op harness (cases/), so no kernel of the Backend
// goes unchecked against the fp64 reference. The enumerators are found at compile time, not
// listed here: a function template's __PRETTY_FUNCTION__ names its enumerator argument
// ("V = tessel::kernels::Op::Gemm") and prints a value that names none as a cast
// ("V = (tessel::kernels::Op)19"), in GCC and Clang alike. A new Op is thus covered by this test
// the moment it is declared.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "op_harness.h"

namespace tessel::testing {
namespace {

using kernels::Op;

// Values probed; Op has far fewer enumerators (checked below).
constexpr int kProbed = 128;

// The enumerator's name ("Gemm"), or "" when V names no enumerator.
template <Op V>
std::string_view enumerator_name() {
  std::string_view f = __PRETTY_FUNCTION__;
  const size_t at = f.find("V = ");
  if (at == std::string_view::npos) return {};
  f.remove_prefix(at + 4);
  f = f.substr(0, f.find_first_of(";]"));
  if (f.empty() || f.front() == '(') return {};
  const size_t colons = f.rfind("::");
  return colons == std::string_view::npos ? f : f.substr(colons + 2);
}

template <size_t... I>
std::vector<std::string_view> probe(std::index_sequence<I...>) {
  return {enumerator_name<static_cast<Op>(static_cast<int>(I))>()...};
}

// The names of Op's enumerators, by value (index i names Op(i)): the values 0, 1, ... before the
// first value that names no enumerator.
std::vector<std::string_view> op_enumerators() {
  std::vector<std::string_view> names = probe(std::make_index_sequence<kProbed>{});
  size_t n = 0;
  while (n < names.size() && !names[n].empty()) ++n;
  names.resize(n);
  return names;
}

TEST(OpHarnessCoverage, EnumeratorsAreFound) {
  // The probe reads this compiler's format: a known enumerator by name, a cast value as none.
  EXPECT_EQ(enumerator_name<Op::Gemm>(), "Gemm");
  EXPECT_EQ(enumerator_name<static_cast<Op>(kProbed + 1000)>(), "");
  const std::vector<std::string_view> all = probe(std::make_index_sequence<kProbed>{});
  const std::vector<std::string_view> ops = op_enumerators();
  ASSERT_GT(ops.size(), 1u);
  // Op's values are 0 ... n-1 (none is skipped), and fewer than kProbed.
  for (size_t i = ops.size(); i < all.size(); ++i)
    EXPECT_TRUE(all[i].empty()) << "kernels::Op has a gap before value " << i << " (" << all[i]
                                << "): this test assumes contiguous values from 0";
}

TEST(OpHarnessCoverage, EveryOpHasACase) {
  const std::vector<std::string_view> ops = op_enumerators();
  ASSERT_FALSE(ops.empty());
  std::vector<int> cases(ops.size(), 0);
  for (const OpCase& c : all_op_cases()) {
    const int v = static_cast<int>(c.op);
    ASSERT_TRUE(v >= 0 && v < int(ops.size()))
        << "case " << c.name << " has op value " << v << ", not an enumerator of kernels::Op";
    ++cases[size_t(v)];
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_GT(cases[i], 0) << "kernels::Op::" << ops[i] << " (" << kernels::op_name(Op(int(i)))
                           << ") has no case in the op harness: add its cases in "
                              "tests/kernels/cases/ and register them in all_cases.cpp";
  }
}

}  // namespace
}  // namespace tessel::testing
