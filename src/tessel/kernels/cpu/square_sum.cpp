// SPDX-License-Identifier: Apache-2.0
// Multi-tensor sums of squares (the gradient norm's kernel). All tensors' blocks of
// kSquareSumBlock elements form one list that the pool splits, so a thousand small gradients
// parallelise as well as one large one; each block's partial sum lands in its own slot and the
// slots are added in block order, which makes the result independent of the thread count.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

// Blocks per parallel task; below this many blocks in total the work stays on the caller.
constexpr int64_t kBlockGrain = 4;

template <typename T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>)
    return double(to_float(x));
  else
    return double(x);
}

// Sum of squares of x[lo, hi) in f64. kLanes independent accumulators hide the FMA latency and
// let the loop vectorise (the compiler does not reassociate plain f64 adds on its own); the lanes
// are then added pairwise, a fixed order.
template <typename T>
double block_square_sum(const T* x, int64_t lo, int64_t hi) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = lo;
  for (; i + kLanes <= hi; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double v = to_double(x[i + j]);
      acc[j] += v * v;
    }
  }
  for (; i < hi; ++i) {
    const double v = to_double(x[i]);
    acc[0] += v * v;
  }
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  return acc[0];
}

double tensor_block(const Tensor& x, int64_t lo, int64_t hi) {
  double s = 0;
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_integral_v<T>) s = block_square_sum(x.data<T>(), lo, hi);
  });
  return s;
}

}  // namespace

void CpuBackend::square_sums(std::span<const Tensor> xs, std::span<double> out) {
  validate_square_sums(*this, xs, out);
  std::vector<int64_t> first(xs.size() + 1, 0);  // prefix sums of blocks per tensor
  for (size_t i = 0; i < xs.size(); ++i)
    first[i + 1] = first[i] + (xs[i].numel() + kSquareSumBlock - 1) / kSquareSumBlock;
  std::vector<double> partial(size_t(first.back()), 0.0);
  parallel_for(0, first.back(), kBlockGrain, [&](int64_t lo, int64_t hi) {
    size_t t = size_t(std::upper_bound(first.begin(), first.end(), lo) - first.begin() - 1);
    for (int64_t b = lo; b < hi; ++b) {
      while (b >= first[t + 1]) ++t;  // skips empty tensors too
      const int64_t start = (b - first[t]) * kSquareSumBlock;
      partial[size_t(b)] =
          tensor_block(xs[t], start, std::min(xs[t].numel(), start + kSquareSumBlock));
    }
  });
  for (size_t i = 0; i < xs.size(); ++i) {
    double total = 0.0;
    for (int64_t b = first[i]; b < first[i + 1]; ++b) total += partial[size_t(b)];
    out[i] = total;
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
