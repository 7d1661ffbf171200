// SPDX-License-Identifier: Apache-2.0
// Tolerances for tests that compare two evaluations of the same computation which differ only in
// the order of their floating-point sums: parallel layouts against one process (data, ZeRO,
// pipeline, tensor and sequence parallelism), sharded against replicated ops, one kernel set or
// vector width (4, 8 or 16 lanes, FMA or not) against another. Neither side is exact, so the bound
// comes from the dtype's unit roundoff and the reduction length, never from what one machine
// happened to measure. tests/common/tessel_runs.py mirrors these formulas for the Python scripts.
//
// The compared quantity is always a norm-wise relative error, ||got - want|| / ||want|| (see
// parallel_test_common.h's rel_err), so the bounds below are norm-wise too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tessel/core/dtype.h"

namespace tessel::test {

// Unit roundoff u = 2^-p (p = significand bits including the implicit one): the largest relative
// error of one rounding to nearest. Integer dtypes have none.
constexpr double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return 0x1p-53;
    case DType::F32:
      return 0x1p-24;
    case DType::F16:
      return 0x1p-11;
    case DType::BF16:
      return 0x1p-8;
    default:
      return 0;
  }
}

// λ of the probabilistic forward-error bound of a sum of n terms (Higham & Mary, "A new approach
// to probabilistic rounding error analysis", SISC 41(5), 2019, Thm 2.4): with rounding errors that
// are independent and mean-zero, |fl(sum) - sum| <= λ·sqrt(n)·u·Σ|x_i| fails with probability at
// most about 2·n·exp(-λ²/2); λ = 4 makes that 7e-4·n for one sum, and a norm-wise error is an RMS
// over many such sums, so it is far below the bound. (The worst case, γ_n = n·u/(1 - n·u), is
// attained only by adversarial inputs; kernels and collectives sum random-sign data.)
inline constexpr double kLambda = 4;

// The bound on ||a - b|| / ||b|| for two evaluations a, b in `dtype` of a computation whose sums
// are reordered: its longest reordered reduction has n terms (tokens of the batch for a weight
// gradient, the inner dimension for a product) and a result passes through `depth` reordered
// stages in a chain (forward and backward through the layers: pass the layer count, e.g.
// n_layer + 2 for a GPT-2 with its embedding and head).
//
//   tol = 2 · λ · sqrt(depth) · u · sqrt(n),   2·λ = kReorder = 8.
//
// - λ·u·sqrt(n): one evaluation of one sum (above); the sums of a layer's outputs are well
//   conditioned in the norm-wise sense (LayerNorm and softmax normalise what enters them), so
//   Σ|x_i| is of the order of |Σ x_i| for the vector as a whole.
// - 2: the difference of two evaluations is at most the sum of their two errors.
// - sqrt(depth): the stages' rounding errors are independent and enter with gain about one, so
//   they add in quadrature.
// Calibration against the one measurement that failed a machine-specific bound (issue 14): the
// data-parallel GPT-2 of tests/parallel/mpi/data_parallel_main.cpp on 3 ranks and AVX-512 gave
// 2.06e-6 (34·u) for ln_f.bias; this bound there (n = 102 tokens, depth 5) is 1.1e-5 (181·u), a
// margin of 5. A real bug (a rank's share missing or counted twice, a wrong 1/n scale, a shard
// offset off by one, a stale bucket) moves the result by 1e-2 or more: three orders above.
inline constexpr double kReorder = 2 * kLambda;

inline double reorder_tolerance(DType dtype, int64_t n, int64_t depth = 1) {
  return kReorder * std::sqrt(double(std::max<int64_t>(depth, 1))) * unit_roundoff(dtype) *
         std::sqrt(double(std::max<int64_t>(n, 1)));
}

// One evaluation in `dtype` against an exact reference (hand-written f64 loops, PyTorch in f64):
// only one side rounds, so half of reorder_tolerance, relative to the magnitude Σ|x_i| of the
// longest sum's terms:
//
//   tol = λ · sqrt(depth) · u · sqrt(n).
//
// A stage's element-wise roundings (its output's, a subtraction, a division, a square root, exp or
// tanh within a few ulps, in any vector width) are a few u each, inside λ·sqrt(n) >= 5.6 u for
// n >= 2. Any vector width or FMA use changes which rounding errors occur, not this bound.
inline double reference_tolerance(DType dtype, int64_t n, int64_t depth = 1) {
  return reorder_tolerance(dtype, n, depth) / 2;
}

// reference_tolerance as an absolute, element-wise bound for values up to `max_abs` in magnitude,
// each a sum of n terms of random signs: Σ|x_i| <= sqrt(n)·||x||_2 (Cauchy-Schwarz) and ||x||_2 is
// of the order of |Σ x_i| for random signs, so the magnitude is sqrt(n)·max_abs:
//
//   tol = λ · sqrt(depth) · u · n · max_abs.
//
// For comparisons of one element at a time (EXPECT_NEAR against a loop) where the norm-wise
// rel_err would hide a wrong element. A wrong index or a dropped term is off by O(max_abs / n) or
// more, 1e-2 of max_abs for the small n (<= 64) of the tests that use it.
inline double elementwise_tolerance(DType dtype, int64_t n, int64_t depth, double max_abs) {
  return reference_tolerance(dtype, n, depth) * std::sqrt(double(std::max<int64_t>(n, 1))) *
         max_abs;
}

// Largest |x| of a vector: elementwise_tolerance's max_abs.
template <typename T>
double max_abs_of(const std::vector<T>& v) {
  double m = 0;
  for (const T& x : v) m = std::max(m, std::abs(double(x)));
  return m;
}

// Parameters after several AdamW steps from the same start, when every step's gradients differ by
// at most `per_step` (norm-wise relative, e.g. reorder_tolerance). AdamW's update m̂/(sqrt(v̂)+ε) is
// invariant to the scale of each element's gradient, so a gradient error δ_i (relative, per
// element) moves the update by at most about δ_i and the parameter by lr·δ_i per step; summed over
// the steps (errors of successive steps add, at worst aligned) a tensor with RMS value `param_rms`
// is off, relative, by
//
//   tol = K · per_step · max(1, lr_sum / param_rms),   lr_sum = Σ lr over the steps,   K = 4.
//
// K stands for the ratio of the RMS element-wise relative gradient error to the norm-wise one:
// elements whose gradient is smaller than the tensor's RMS carry a larger relative error into
// their normalised update. Elements whose gradient is zero in exact arithmetic (GPT-2's c_attn key
// bias, which softmax ignores) exceed any such factor, since Adam turns pure rounding noise into
// lr-sized steps; the callers leave them out with that reason. The max(1, ...) keeps the rounding
// of the parameter values themselves (LayerNorm weights at 1, where lr_sum / param_rms is small)
// and near-zero-gradient elements of small tensors covered. K is not derived from first
// principles: it rests on a measurement, zero_main on 2 ranks (AVX2), where gradients agreed to
// about 1e-7 and parameters to 2e-6..4e-6 after 3 steps with lr_sum / param_rms = 1.5 (a measured
// element-wise factor of about 27). The derived per-step bound there is 8.8e-6, 90 times the
// measured gradient difference, so K = 4 gives 5.3e-5: 13 times the measurement. A wrong update
// (weight decay missing or doubled, a stale moment, a wrong bias correction) moves a parameter by
// about lr * wd or more per step, 1e-3 relative and above; a clip factor missing in one of
// zero_test's steps, by about 1e-4, still 6 times that test's bound.
inline constexpr double kAdamElementwise = 4;

inline double adam_tolerance(double per_step, double lr_sum, double param_rms) {
  const double ratio = param_rms > 0 ? lr_sum / param_rms : 1.0;
  return kAdamElementwise * per_step * std::max(1.0, ratio);
}

// RMS of a vector, for adam_tolerance's param_rms.
template <typename T>
double rms_of(const std::vector<T>& v) {
  double s = 0;
  for (const T& x : v) s += double(x) * double(x);
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}

}  // namespace tessel::test
