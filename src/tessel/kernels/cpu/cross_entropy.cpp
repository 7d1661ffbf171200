// SPDX-License-Identifier: Apache-2.0
// CPU softmax cross-entropy over [N, V] logits, parallel over rows: loss = lse - logit[target]
// with lse = max + log(sum(exp(x - max))) (stable for any logit range; the sum accumulates in
// double), and the backward dlogits = dloss * (exp(x - lse) - onehot) from the saved lse.
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
void cross_entropy_impl(const T* logits, IndexView target, int64_t ignore_index, T* losses, T* lse,
                        RowShape r) {
  const int64_t v = r.cols;
  parallel_for(0, r.rows, cpu::row_grain(v), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const T* row = logits + n * v;
      const T max = cpu::row_max(row, v);
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < v; ++c) sum += double(exp_t(T(row[c] - max)));
      double l = double(max) + std::log(sum);
      lse[n] = T(l);
      int64_t t = target[n];
      losses[n] = t == ignore_index ? T(0) : T(l - double(row[t]));
    }
  });
}

template <typename T>
void cross_entropy_backward_impl(const T* logits, IndexView target, const T* lse, const T* dlosses,
                                 int64_t ignore_index, T* dlogits, RowShape r) {
  const int64_t v = r.cols;
  parallel_for(0, r.rows, cpu::row_grain(v), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const T* row = logits + n * v;
      T* drow = dlogits + n * v;
      int64_t t = target[n];
      if (t == ignore_index) {
#pragma omp simd
        for (int64_t c = 0; c < v; ++c) drow[c] = T(0);
        continue;
      }
      const T l = lse[n], scale = dlosses[n];
#pragma omp simd
      for (int64_t c = 0; c < v; ++c) drow[c] = scale * exp_t(T(row[c] - l));
      drow[t] -= scale;
    }
  });
}

}  // namespace

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                               Tensor& losses, Tensor& lse) {
  RowShape r = validate_cross_entropy(*this, logits, targets, ignore_index, losses, lse);
  if (cpu::is_half(logits.dtype()))
    return cpu::half_cross_entropy(*this, logits, targets, ignore_index, losses, lse);
  cpu::dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_impl<T>(logits.data<T>(), IndexView(targets), ignore_index, losses.data<T>(),
                          lse.data<T>(), r);
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                        const Tensor& lse, const Tensor& dlosses,
                                        int64_t ignore_index, Tensor& dlogits) {
  RowShape r =
      validate_cross_entropy_backward(*this, logits, targets, lse, dlosses, ignore_index, dlogits);
  if (cpu::is_half(logits.dtype()))
    return cpu::half_cross_entropy_backward(*this, logits, targets, lse, dlosses, ignore_index,
                                            dlogits);
  cpu::dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_impl<T>(logits.data<T>(), IndexView(targets), lse.data<T>(),
                                   dlosses.data<T>(), ignore_index, dlogits.data<T>(), r);
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
