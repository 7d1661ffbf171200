// SPDX-License-Identifier: Apache-2.0
// CPU softmax / log-softmax over the last dim and their backward, parallel over rows. Stable:
// the row max is subtracted before exp. Row sums accumulate in double (also for f32) so long
// rows (a vocabulary of 50K) lose nothing to summation; the per-element work stays in T.
#include <cmath>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/half_kernels.h"
#include "tessel/kernels/cpu/loops.h"
#include "tessel/kernels/cpu/simd_math.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

using cpu::exp_t;

template <typename T>
void softmax_rows(const T* x, T* y, RowShape r, bool log) {
  const int64_t n = r.cols;
  parallel_for(0, r.rows, cpu::row_grain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const T* xr = x + row * n;
      T* yr = y + row * n;
      const T max = cpu::row_max(xr, n);
      double sum = 0;
      if (log) {
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < n; ++c) sum += double(exp_t(T(xr[c] - max)));
        const T log_sum = T(std::log(sum));
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) yr[c] = (xr[c] - max) - log_sum;
      } else {
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < n; ++c) {
          T e = exp_t(T(xr[c] - max));
          yr[c] = e;
          sum += double(e);
        }
        const T inv = T(1.0 / sum);
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) yr[c] *= inv;
      }
    }
  });
}

template <typename T>
void softmax_backward_rows(const T* y, const T* dy, T* dx, RowShape r, bool log) {
  const int64_t n = r.cols;
  parallel_for(0, r.rows, cpu::row_grain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const T* yr = y + row * n;
      const T* dyr = dy + row * n;
      T* dxr = dx + row * n;
      double acc = 0;
      if (log) {  // y = log p: dx = dy - p * sum(dy)
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < n; ++c) acc += double(dyr[c]);
        const T sum = T(acc);
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) dxr[c] = dyr[c] - exp_t(yr[c]) * sum;
      } else {  // y = p: dx = p * (dy - sum(dy * p))
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < n; ++c) acc += double(dyr[c]) * double(yr[c]);
        const T dot = T(acc);
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
      }
    }
  });
}

}  // namespace

void CpuBackend::softmax(const Tensor& x, Tensor& y, bool log) {
  RowShape r = validate_softmax(*this, x, y);
  if (cpu::is_half(x.dtype())) return cpu::half_softmax(*this, x, y, log);
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    softmax_rows<T>(x.data<T>(), y.data<T>(), r, log);
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  RowShape r = validate_softmax_backward(*this, y, dy, dx);
  if (cpu::is_half(y.dtype())) return cpu::half_softmax_backward(*this, y, dy, dx, log);
  cpu::dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_rows<T>(y.data<T>(), dy.data<T>(), dx.data<T>(), r, log);
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
