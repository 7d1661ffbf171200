// SPDX-License-Identifier: Apache-2.0
// Global gradient-norm clipping (Pascanu et al. 2013), with torch.nn.utils.clip_grad_norm_'s
// factor max_norm / (norm + 1e-6). The gradients are cut into fixed blocks whose partial sums of
// squares are computed in parallel and then added in block order, so the norm is the same for
// every thread count, not only for a fixed one.
#include "tessel/train/grad_clip.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tessel/core/threads.h"

namespace tessel::train {

namespace {

// Elements per block: large enough that a block is a few microseconds of streaming, small enough
// that a few-million-element gradient splits evenly over the pool.
constexpr int64_t kBlock = 1 << 13;
// Blocks per parallel task; below this many blocks in total the work stays on the caller.
constexpr int64_t kBlockGrain = 4;

// The defined gradients, checked to be floating point.
std::vector<Tensor> defined_grads(const std::vector<Tensor>& params, const char* what) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    TESSEL_CHECK(params[i].defined(), what, ": parameter ", i, " is an undefined tensor");
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    TESSEL_CHECK(dtype_is_float(g.dtype()), what, ": the gradient of parameter ", i, " ('",
                 params[i].name(), "') is ", dtype_name(g.dtype()), ", expected a float dtype");
    // The loops below read host memory; other devices would reduce with their backend.
    TESSEL_CHECK(g.device().is_cpu(), what, ": the gradient of parameter ", i, " ('",
                 params[i].name(), "') is on ", g.device().str(),
                 "; only cpu gradients are supported");
    grads.push_back(std::move(g));
  }
  return grads;
}

// Calls fn(grad, lo, hi) for every block [lo, hi) of every gradient, blocks spread over the pool;
// fn also gets the global block index.
template <typename Fn>
void for_each_block(const std::vector<Tensor>& grads, Fn&& fn) {
  std::vector<int64_t> first_block(grads.size() + 1, 0);  // prefix sums of blocks per grad
  for (size_t i = 0; i < grads.size(); ++i)
    first_block[i + 1] = first_block[i] + (grads[i].numel() + kBlock - 1) / kBlock;
  parallel_for(0, first_block.back(), kBlockGrain, [&](int64_t lo, int64_t hi) {
    size_t t =
        std::upper_bound(first_block.begin(), first_block.end(), lo) - first_block.begin() - 1;
    for (int64_t b = lo; b < hi; ++b) {
      while (b >= first_block[t + 1]) ++t;  // skips empty gradients too
      int64_t start = (b - first_block[t]) * kBlock;
      fn(b, grads[t], start, std::min(grads[t].numel(), start + kBlock));
    }
  });
}

template <typename T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>)
    return double(to_float(x));
  else
    return double(x);
}

// Sum of squares of x[lo, hi) in f64. kLanes independent accumulators (four AVX2 registers of
// doubles) hide the FMA latency and let the loop vectorise: the compiler does not reassociate
// plain f64 adds on its own.
template <typename T>
double square_sum(const T* x, int64_t lo, int64_t hi) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = lo;
  for (; i + kLanes <= hi; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      double v = to_double(x[i + j]);
      acc[j] += v * v;
    }
  }
  for (; i < hi; ++i) {
    double v = to_double(x[i]);
    acc[0] += v * v;
  }
  for (int width = kLanes / 2; width >= 1; width /= 2)  // pairwise: a fixed order
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  return acc[0];
}

template <typename T>
void scale(T* x, int64_t lo, int64_t hi, double factor) {
  if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>) {
    const float f = float(factor);
    for (int64_t i = lo; i < hi; ++i) x[i] = from_float<T>(to_float(x[i]) * f);
  } else {
    const T f =
        T(factor);  // one rounding of the factor, as torch multiplies by a same-dtype scalar
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) x[i] *= f;
  }
}

// Calls fn(T{}) for the floating dtypes gradients come in; other dtypes are an Error.
template <typename Fn>
void dispatch(DType dtype, Fn&& fn) {
  TESSEL_CHECK(dtype_is_float(dtype), "grad clipping: unsupported gradient dtype ",
               dtype_name(dtype));
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_integral_v<T>) fn(tag);
  });
}

}  // namespace

double grad_square_sum(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads = defined_grads(params, "grad_square_sum");
  int64_t blocks = 0;
  for (const Tensor& g : grads) blocks += (g.numel() + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
  for_each_block(grads, [&](int64_t b, const Tensor& g, int64_t lo, int64_t hi) {
    dispatch(g.dtype(),
             [&](auto tag) { partial[size_t(b)] = square_sum(g.data<decltype(tag)>(), lo, hi); });
  });
  double total = 0.0;
  for (double p : partial) total += p;  // fixed order: deterministic for any thread count
  return total;
}

double grad_norm(const std::vector<Tensor>& params) {
  return std::sqrt(grad_square_sum(params));
}

void scale_grads(const std::vector<Tensor>& params, double factor) {
  std::vector<Tensor> grads = defined_grads(params, "scale_grads");
  for_each_block(grads, [&](int64_t, const Tensor& g, int64_t lo, int64_t hi) {
    dispatch(g.dtype(), [&](auto tag) { scale(g.data<decltype(tag)>(), lo, hi, factor); });
  });
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  TESSEL_CHECK(std::isfinite(max_norm) && max_norm > 0,
               "clip_grad_norm: max_norm must be finite and > 0, got ", max_norm);
  const double norm = grad_norm(params);
  if (!std::isfinite(norm)) return norm;  // the caller skips the step; the grads stay as they are
  const double factor = max_norm / (norm + 1e-6);
  if (factor < 1.0) scale_grads(params, factor);
  return norm;
}

}  // namespace tessel::train
