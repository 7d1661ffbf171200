// SPDX-License-Identifier: Apache-2.0
// The calibrated curves the compute cost reads (plan/compute_cost.h): a GEMM's rate over a grid
// of measured shapes, interpolated in log coordinates, and a kernel's measured time as a function
// of its roofline time, piecewise linear in log-log between the measured calls. Measured tables
// rather than one peak and one bandwidth, because the small kernels of a step run far from both
// (a fixed cost per call, caches, a GEMM's blocking that a thin shape leaves idle) — the
// approach of PaLEO's and Calculon's efficiency tables and of Alpa's profiled operator costs.
// docs/PLANNER.md, "Step time".
#pragma once

#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace tessel::plan {

struct GemmSample {
  double m = 0, n = 0, k = 0;
  double flops = 0;  // FLOP/s measured
};

// The rate at (m, n, k) from samples that form a full grid (every combination of their distinct
// m, n and k values measured exactly once): multilinear interpolation of log(rate) in log2 of
// each size, each coordinate clamped to the grid's range. nullopt when the samples are not a
// full grid (then the caller takes the nearest sample). An axis with one value is constant.
std::optional<double> gemm_rate_on_grid(std::span<const GemmSample> samples, double m, double n,
                                        double k);

// y(x) through measured points (x > 0, y > 0): piecewise linear in (log x, log y) between the
// points sorted by x (points at equal x merged by their geometric mean); below the smallest x the
// smallest point's y (a fixed cost per call does not shrink), above the largest x the largest
// point's y scaled by x / x_last (a throughput-bound kernel's time grows with its work).
// Throws on no points or a non-positive coordinate.
double curve_at(std::vector<std::pair<double, double>> points, double x);

}  // namespace tessel::plan
