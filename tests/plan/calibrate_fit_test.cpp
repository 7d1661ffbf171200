// SPDX-License-Identifier: Apache-2.0
// The fits behind `tessel plan calibrate`'s figures (the alpha-beta line of a link, an op's cost
// outside its kernel per op and per byte it writes) and the cache state its kernels are timed in
// (the measurements themselves run under mpirun in tests/plan/calibrate_check.py).
#include <gtest/gtest.h>

#include <vector>

#include "tessel/core/error.h"
#include "tessel/plan/calibrate.h"
#include "tessel/plan/calibrate_kernels.h"
#include "tessel/plan/calibrate_timing.h"

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

// Two steps of the same ops, one writing 32 times the bytes: the fit separates the fixed cost per
// op from the part that grows with the bytes (a fit without the per-byte term charges the large
// step's bytes nothing).
TEST(CalibrateFit, OpOverheadPerOpAndPerByte) {
  const double per_op = 1.5e-6, per_byte = 2e-10;
  const OverheadSample small{400, 1e6, 400 * per_op + 1e6 * per_byte};
  const OverheadSample large{400, 3.2e7, 400 * per_op + 3.2e7 * per_byte};
  const OpOverhead fit = fit_op_overhead(small, large);
  EXPECT_NEAR(fit.per_op, per_op, per_op * 1e-9);
  EXPECT_NEAR(fit.per_byte, per_byte, per_byte * 1e-9);
  // Charged to a step of 300 ops writing 8 MB: what the samples' costs predict.
  EXPECT_NEAR(300 * fit.per_op + 8e6 * fit.per_byte, 300 * per_op + 8e6 * per_byte, 1e-12);
}

TEST(CalibrateFit, OpOverheadNeverNegative) {
  // Noise made the larger step cheaper: no per-byte term, the small step's seconds per op.
  const OpOverhead cheaper = fit_op_overhead({400, 1e6, 8e-4}, {400, 3.2e7, 6e-4});
  EXPECT_DOUBLE_EQ(cheaper.per_byte, 0);
  EXPECT_DOUBLE_EQ(cheaper.per_op, 8e-4 / 400);
  // The bytes explain more than all of it: no per-op term, the large step's seconds per byte.
  const OpOverhead bytes_only = fit_op_overhead({400, 1e6, 1e-4}, {400, 3.2e7, 1e-2});
  EXPECT_DOUBLE_EQ(bytes_only.per_op, 0);
  EXPECT_DOUBLE_EQ(bytes_only.per_byte, 1e-2 / 3.2e7);
  // Proportional samples cannot separate the terms.
  const OpOverhead same = fit_op_overhead({400, 1e6, 1e-3}, {800, 2e6, 2e-3});
  EXPECT_DOUBLE_EQ(same.per_byte, 0);
  EXPECT_DOUBLE_EQ(same.per_op, 1e-3 / 400);
  EXPECT_THROW(fit_op_overhead({0, 1e6, 1e-3}, {400, 2e6, 2e-3}), Error);
}

// Every timed call of a kernel follows an eviction of the private caches (a step's operands were
// written kernels earlier), never a call that just touched the same tensors; the warm-up call is
// the only one without.
TEST(CalibrateTiming, EvictsBeforeEveryTimedCall) {
  calibration::CacheEviction cache;
  EXPECT_GE(cache.bytes(), 2 * calibration::private_cache_bytes() * num_threads() - 4);
  int calls = 0, evictions = 0, last_was_eviction = 0;
  const double t = calibration::median_time(
      [&] {
        ++calls;
        if (calls > 1) last_was_eviction += evictions == calls - 1;
      },
      1e-4,
      [&] {
        ++evictions;
        cache.evict();
      });
  EXPECT_GE(t, 0);
  EXPECT_GE(calls, 4);
  EXPECT_EQ(evictions, calls - 1);
  EXPECT_EQ(last_was_eviction, calls - 1);
}

}  // namespace
}  // namespace tessel::plan
