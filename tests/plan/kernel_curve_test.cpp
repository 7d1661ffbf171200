// SPDX-License-Identifier: Apache-2.0
// The calibrated curves' fitting: a synthetic measured GEMM table whose log-rate is multilinear
// in the sizes' logs is recovered exactly between its points (and clamped outside), a table that
// is not a full grid is left to the nearest point; a kernel's time curve passes through its
// points, is log-log linear between them, constant below and proportional above.
#include "tessel/plan/kernel_curve.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tessel/core/error.h"
#include "tessel/plan/cluster.h"

namespace tessel::plan {
namespace {

// log(rate) = 20 + 0.3 l(m) + 0.2 l(n) + 0.1 l(k) + 0.05 l(m) l(k), l = log2: multilinear in the
// logs, which the interpolation reproduces exactly.
double synthetic_rate(double m, double n, double k) {
  const double lm = std::log2(m), ln = std::log2(n), lk = std::log2(k);
  return std::exp(20 + 0.3 * lm + 0.2 * ln + 0.1 * lk + 0.05 * lm * lk);
}

std::vector<GemmSample> synthetic_grid() {
  std::vector<GemmSample> s;
  for (double m : {16.0, 64.0, 256.0})
    for (double n : {7.0, 112.0})
      for (double k : {13.0, 33.0, 1024.0}) s.push_back({m, n, k, synthetic_rate(m, n, k)});
  return s;
}

TEST(KernelCurve, GridRecoversAMultilinearRateExactly) {
  const std::vector<GemmSample> grid = synthetic_grid();
  for (const GemmSample& s : grid)
    EXPECT_NEAR(*gemm_rate_on_grid(grid, s.m, s.n, s.k) / s.flops, 1.0, 1e-12);
  for (const auto& [m, n, k] : std::vector<std::array<double, 3>>{
           {17, 8, 14}, {33, 50, 500}, {100, 111, 20}, {255, 7.5, 1000}})
    EXPECT_NEAR(*gemm_rate_on_grid(grid, m, n, k) / synthetic_rate(m, n, k), 1.0, 1e-12)
        << m << "x" << n << "x" << k;
  // Outside the grid each coordinate is clamped to its range.
  EXPECT_NEAR(*gemm_rate_on_grid(grid, 1, 5000, 33) / synthetic_rate(16, 112, 33), 1.0, 1e-12);
  EXPECT_NEAR(*gemm_rate_on_grid(grid, 4096, 3, 1 << 20) / synthetic_rate(256, 7, 1024), 1.0,
              1e-12);
}

TEST(KernelCurve, NotAGridIsLeftToTheNearestPoint) {
  std::vector<GemmSample> grid = synthetic_grid();
  grid.pop_back();
  EXPECT_FALSE(gemm_rate_on_grid(grid, 64, 7, 33).has_value());
  grid.push_back(grid.front());  // the right count, but a shape twice
  EXPECT_FALSE(gemm_rate_on_grid(grid, 64, 7, 33).has_value());
  EXPECT_FALSE(gemm_rate_on_grid({}, 64, 7, 33).has_value());
  // One point is a grid of one cell: its rate everywhere.
  const GemmSample one[] = {{512, 512, 512, 4e10}};
  EXPECT_DOUBLE_EQ(*gemm_rate_on_grid(one, 7, 13, 33), 4e10);
}

TEST(KernelCurve, ClusterInterpolatesAGridAndFallsBackPerLayout) {
  Cluster c;
  c.device.peak_flops = {synthetic_rate(256, 112, 1024) * 2, 0, 0, 0, 0};
  for (const GemmSample& s : synthetic_grid())
    c.gemm.push_back({"f32", int64_t(s.m), int64_t(s.n), int64_t(s.k), s.flops, "tn"});
  c.gemm.push_back({"f32", 64, 64, 64, 1e9, "nn"});
  const double peak = c.device.peak_flops[0];
  EXPECT_NEAR(c.gemm_efficiency("f32", 33, 50, 500, "tn"), synthetic_rate(33, 50, 500) / peak,
              1e-12);
  // "nt" has no points: the "nn" table (one point) answers.
  EXPECT_DOUBLE_EQ(c.gemm_efficiency("f32", 33, 50, 500, "nt"), 1e9 / peak);
  EXPECT_DOUBLE_EQ(c.gemm_efficiency("f32", 33, 50, 500), 1e9 / peak);
}

TEST(KernelCurve, TimeCurveThroughItsPoints) {
  // A fixed 2 us, then 1 ns per unit: the measured points of t = 2e-6 + 1e-9 x.
  std::vector<std::pair<double, double>> pts;
  for (double x : {1e2, 1e3, 1e4, 1e5}) pts.emplace_back(x, 2e-6 + 1e-9 * x);
  for (const auto& [x, y] : pts) EXPECT_DOUBLE_EQ(curve_at(pts, x), y);
  // Between points: linear in log-log.
  const double x = 3e3;
  const double w = (std::log(x) - std::log(1e3)) / (std::log(1e4) - std::log(1e3));
  EXPECT_NEAR(curve_at(pts, x),
              std::exp((1 - w) * std::log(2e-6 + 1e-6) + w * std::log(2e-6 + 1e-5)), 1e-18);
  EXPECT_DOUBLE_EQ(curve_at(pts, 1), 2e-6 + 1e-7);             // below: the smallest point's
  EXPECT_NEAR(curve_at(pts, 1e6), (2e-6 + 1e-4) * 10, 1e-15);  // above: proportional
  // Points in any order, and two at one x merged by their geometric mean.
  std::vector<std::pair<double, double>> shuffled = {pts[2], pts[0], {1e3, 4e-6}, pts[1], pts[3]};
  EXPECT_NEAR(curve_at(shuffled, 1e3), std::sqrt(4e-6 * (2e-6 + 1e-6)), 1e-18);
  EXPECT_THROW(curve_at({}, 1), Error);
  EXPECT_THROW(curve_at(pts, 0), Error);
  EXPECT_THROW(curve_at({{1, 0}}, 1), Error);
}

}  // namespace
}  // namespace tessel::plan
