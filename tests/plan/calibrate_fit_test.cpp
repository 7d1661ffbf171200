// SPDX-License-Identifier: Apache-2.0
// The alpha-beta fit behind `tessel plan calibrate`'s link figures (the measurements themselves
// run under mpirun in tests/plan/calibrate_check.py).
#include <gtest/gtest.h>

#include <vector>

#include "tessel/core/error.h"
#include "tessel/plan/calibrate.h"

namespace tessel::plan {
namespace {

TEST(CalibrateFit, RecoversAnExactLine) {
  const double alpha = 3.7e-6, beta = 1.0 / 13e9;
  std::vector<double> bytes = {8, 128, 2048, 32768, 524288, 13e6}, seconds;
  for (double b : bytes) seconds.push_back(alpha + beta * b);
  const AlphaBeta fit = fit_alpha_beta(bytes, seconds);
  EXPECT_NEAR(fit.alpha, alpha, alpha * 1e-6);
  EXPECT_NEAR(fit.beta, beta, beta * 1e-6);
}

// A point a time slice late (as on a shared machine) among the small and among the large
// messages leaves the line where the other points put it.
TEST(CalibrateFit, IgnoresDelayedPoints) {
  const double alpha = 2e-6, beta = 1e-9;
  const std::vector<double> bytes = {8, 64, 512, 4096, 32768, 262144, 2097152, 16777216, 33};
  std::vector<double> seconds;
  for (double b : bytes) seconds.push_back(alpha + beta * b);
  seconds[1] += 5e-3;  // 64 B took 5 ms
  seconds[6] *= 30;    // 2 MiB took 30 times as long
  const AlphaBeta fit = fit_alpha_beta(bytes, seconds);
  EXPECT_NEAR(fit.alpha, alpha, alpha * 0.05);
  EXPECT_NEAR(fit.beta, beta, beta * 0.01);
}

TEST(CalibrateFit, KeepsBothTermsPositive) {
  // Time falls with size (noise): the slope would be negative; the ends bound the line instead.
  const AlphaBeta fit = fit_alpha_beta({100, 200}, {5e-6, 1e-6});
  EXPECT_DOUBLE_EQ(fit.alpha, 5e-6);
  EXPECT_DOUBLE_EQ(fit.beta, 1e-6 * 1e-3 / 100);
  EXPECT_GT(fit.beta, 0);
}

TEST(CalibrateFit, RefusesTooFewPoints) {
  EXPECT_THROW(fit_alpha_beta({8}, {1e-6}), Error);
  EXPECT_THROW(fit_alpha_beta({8, 8, 8}, {1e-6, 2e-6, 3e-6}), Error);
  EXPECT_THROW(fit_alpha_beta({8, 16}, {1e-6, 0}), Error);
  EXPECT_THROW(fit_alpha_beta({8, 16}, {1e-6}), Error);
}

}  // namespace
}  // namespace tessel::plan
