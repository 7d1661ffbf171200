// SPDX-License-Identifier: Apache-2.0
// CPU embedding gather (row copies, parallel over ids) and its scatter-add backward. The
// backward is parallel over column ranges rather than ids: repeated ids then never race, and
// every dweight element receives its additions in id order, whatever the thread count.
#include <cstring>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/half_kernels.h"
#include "tessel/kernels/cpu/loops.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

void CpuBackend::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  RowShape r = validate_embedding(*this, weight, ids, out);
  IndexView id(ids);
  const char* w = static_cast<const char*>(weight.data_ptr());
  char* o = static_cast<char*>(out.data_ptr());
  const size_t row_bytes = size_t(r.cols) * weight.element_size();
  parallel_for(0, r.rows, cpu::row_grain(r.cols), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n)
      std::memcpy(o + size_t(n) * row_bytes, w + size_t(id[n]) * row_bytes, row_bytes);
  });
}

void CpuBackend::embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) {
  RowShape r = validate_embedding_backward(*this, dout, ids, dweight);
  if (cpu::is_half(dweight.dtype())) return cpu::half_embedding_backward(*this, dout, ids, dweight);
  IndexView id(ids);
  cpu::dispatch_float(dweight.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* d = dout.data<T>();
    T* dw = dweight.data<T>();
    const int64_t n_cols = r.cols;
    // Column ranges of at least 16 elements (a cache line of f32) so tasks share no lines.
    int64_t grain = std::max<int64_t>(16, cpu::kElementGrain / std::max<int64_t>(r.rows, 1));
    parallel_for(0, n_cols, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t n = 0; n < r.rows; ++n) {
        T* dst = dw + id[n] * n_cols;
        const T* src = d + n * n_cols;
#pragma omp simd
        for (int64_t c = lo; c < hi; ++c) dst[c] += src[c];
      }
    });
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
