// SPDX-License-Identifier: Apache-2.0
// Small pieces shared by the CPU kernel files: dispatch on the floating dtype (the CPU backend
// runs f32 and f64) and the work sizes below which a kernel stays on the calling thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "tessel/core/error.h"
#include "tessel/tensor/tensor.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

// Elements per task for streaming kernels: a parallel region costs microseconds, about the time
// one core needs to stream 16K floats.
inline constexpr int64_t kElementGrain = 1 << 14;

// Rows per task for a row-wise kernel with `cols` elements per row.
inline int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, kElementGrain / std::max<int64_t>(cols, 1));
}

// max(x[0, n)), -inf for n = 0. A NaN may be skipped: callers feed the max into exp(x - max),
// which turns NaN inputs into NaN outputs anyway.
template <typename T>
T row_max(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// Calls fn(T{}) with T = float or double.
template <typename Fn>
void dispatch_float(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      fn(float{});
      return;
    case DType::F64:
      fn(double{});
      return;
    default:
      TESSEL_FAIL("cpu kernels: no float kernel for dtype ", dtype_name(dtype));
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
