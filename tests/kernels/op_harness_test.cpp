// SPDX-License-Identifier: Apache-2.0
// Runs every registered kernel case on the CPU backend against the fp64 reference.
#include "op_harness.h"

#include <gtest/gtest.h>

namespace tessel::testing {
namespace {

class OpHarness : public ::testing::TestWithParam<size_t> {};

TEST_P(OpHarness, MatchesReference) {
  const OpCase& c = all_op_cases()[GetParam()];
  kernels::Backend& backend = kernels::cpu_backend();
  if (!backend.supports(c.op, c.dtype))
    GTEST_SKIP() << backend.name() << " does not support " << c.name;
  std::string failures = check_op_case(c, backend);
  EXPECT_TRUE(failures.empty()) << c.name << ": " << failures;
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  std::string s = all_op_cases()[info.param].name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

std::vector<size_t> case_indices() {
  std::vector<size_t> v(all_op_cases().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cpu, OpHarness, ::testing::ValuesIn(case_indices()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpHarness);

}  // namespace
}  // namespace tessel::testing
