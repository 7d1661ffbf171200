// SPDX-License-Identifier: Apache-2.0
// Fast conversions between f32 and the 16-bit float formats (bf16, f16) for the CPU kernels:
// vectorised (F16C for f16 in the avx2 and avx512 kernel sets, integer rounding for bf16), parallel
// over tessel's pool, rounding to nearest even exactly as core/dtype.h does element by element.
#pragma once

#include <cstdint>

#include "tessel/tensor/tensor.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

inline bool is_half(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::F16;
}

// dst[i] = float(src[i]) for a bf16 or f16 source.
void half_to_f32(const void* src, DType src_dtype, float* dst, int64_t n);
// dst[i] = round_to_nearest_even(src[i]) for a bf16 or f16 destination (overflow gives inf).
void f32_to_half(const float* src, void* dst, DType dst_dtype, int64_t n);

// One short row on the calling thread (no parallel region, no checks: the dtype must be bf16 or
// f16), for kernels that convert inside their own parallel loops.
void half_row_to_f32(const uint16_t* src, DType src_dtype, float* dst, int64_t n);
void f32_row_to_half(const float* src, uint16_t* dst, DType dst_dtype, int64_t n);

// Row blocks: dst (rows x cols, packed) = float of the 16-bit src rows `src_ld` elements apart,
// and the reverse with rounding. Parallel over rows.
void half_rows_to_f32(const void* src, DType src_dtype, int64_t src_ld, float* dst, int64_t rows,
                      int64_t cols);
void f32_rows_to_half(const float* src, void* dst, DType dst_dtype, int64_t dst_ld, int64_t rows,
                      int64_t cols);

// dst = src converted, for any two dtypes of equal element count (the f32 <-> bf16/f16 pairs take
// the fast paths above; others go through core's element-wise conversion, in parallel).
void convert_tensor(const Tensor& src, Tensor& dst);

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
