// SPDX-License-Identifier: Apache-2.0
// Every differentiable op against central finite differences in fp64, on the CPU backend and on
// the fp64 reference backend, and f32 against f64.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "gradcheck.h"
#include "tessel/autograd/autograd.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::testing {
namespace {

std::string sci(double v) {
  std::ostringstream out;
  out << std::scientific << v;
  return out.str();
}

class GradTest : public ::testing::TestWithParam<size_t> {
 protected:
  const GradCase& grad_case() const { return all_grad_cases()[GetParam()]; }
};

void expect_matches_finite_differences(const GradCase& c) {
  for (uint64_t seed : {1u, 2u}) {
    GradCheckResult r = check_gradients(c, seed);
    EXPECT_GT(r.elements, 0) << c.name;
    EXPECT_TRUE(r.failures.empty()) << c.name << " seed " << seed << ":\n" << r.failures;
    EXPECT_LE(r.max_error, c.rtol) << c.name;
    ::testing::Test::RecordProperty("max_error_seed" + std::to_string(seed), sci(r.max_error));
  }
}

TEST_P(GradTest, CpuMatchesFiniteDifferences) {
  expect_matches_finite_differences(grad_case());
}

TEST_P(GradTest, ReferenceBackendMatchesFiniteDifferences) {
  autograd::BackendScope scope(kernels::reference_backend());
  expect_matches_finite_differences(grad_case());
}

TEST_P(GradTest, F32MatchesF64) {
  double err = f32_vs_f64_error(grad_case(), 3);
  // Judgement bound: the grad cases' reductions are at most a few dozen terms, whose derived
  // f32-vs-f64 bound (tests/common/tolerance.h, reference_tolerance for n <= 64 through 3 stages)
  // is <= 3.3e-6; 1e-5 sits above it for every vector width and far below a wrong gradient (1e-2).
  EXPECT_LE(err, 1e-5) << grad_case().name;
  RecordProperty("f32_error", sci(err));
}

INSTANTIATE_TEST_SUITE_P(Ops, GradTest, ::testing::Range<size_t>(0, all_grad_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return all_grad_cases()[info.param].name;
                         });

}  // namespace
}  // namespace tessel::testing
