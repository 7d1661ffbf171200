// SPDX-License-Identifier: Apache-2.0
// f32 <-> bf16 / f16 conversion loops. bf16 is the top half of an f32, so widening is a shift and
// narrowing adds the rounding bias of round-to-nearest-even before truncating; written as selects
// so that the compiler vectorises them. f16 uses the F16C instructions (vcvtph2ps / vcvtps2ph
// with round-to-nearest-even) in the avx2 and avx512 kernel sets, and core's scalar conversion
// otherwise.
#include <bit>
#include <cstring>

#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/loops.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

namespace {

void bf16_to_f32_loop(const uint16_t* src, float* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(uint32_t(src[i]) << 16);
}

void f32_to_bf16_loop(const float* src, uint16_t* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(src[i]);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    dst[i] = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

void f16_to_f32_loop(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = f16_to_float(F16{src[i]});
}

void f32_to_f16_loop(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = float_to_f16(src[i]).bits;
}

}  // namespace

void half_row_to_f32(const uint16_t* src, DType src_dtype, float* dst, int64_t n) {
  if (src_dtype == DType::BF16)
    bf16_to_f32_loop(src, dst, n);
  else
    f16_to_f32_loop(src, dst, n);
}

void f32_row_to_half(const float* src, uint16_t* dst, DType dst_dtype, int64_t n) {
  if (dst_dtype == DType::BF16)
    f32_to_bf16_loop(src, dst, n);
  else
    f32_to_f16_loop(src, dst, n);
}

void half_to_f32(const void* src, DType src_dtype, float* dst, int64_t n) {
  TESSEL_CHECK(is_half(src_dtype), "half_to_f32: source is ", dtype_name(src_dtype),
               ", expected bf16 or f16");
  const auto* s = static_cast<const uint16_t*>(src);
  parallel_for(0, n, kElementGrain, [&](int64_t lo, int64_t hi) {
    if (src_dtype == DType::BF16)
      bf16_to_f32_loop(s + lo, dst + lo, hi - lo);
    else
      f16_to_f32_loop(s + lo, dst + lo, hi - lo);
  });
}

void f32_to_half(const float* src, void* dst, DType dst_dtype, int64_t n) {
  TESSEL_CHECK(is_half(dst_dtype), "f32_to_half: destination is ", dtype_name(dst_dtype),
               ", expected bf16 or f16");
  auto* d = static_cast<uint16_t*>(dst);
  parallel_for(0, n, kElementGrain, [&](int64_t lo, int64_t hi) {
    if (dst_dtype == DType::BF16)
      f32_to_bf16_loop(src + lo, d + lo, hi - lo);
    else
      f32_to_f16_loop(src + lo, d + lo, hi - lo);
  });
}

void half_rows_to_f32(const void* src, DType src_dtype, int64_t src_ld, float* dst, int64_t rows,
                      int64_t cols) {
  TESSEL_CHECK(is_half(src_dtype), "half_rows_to_f32: source is ", dtype_name(src_dtype),
               ", expected bf16 or f16");
  const auto* s = static_cast<const uint16_t*>(src);
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      if (src_dtype == DType::BF16)
        bf16_to_f32_loop(s + r * src_ld, dst + r * cols, cols);
      else
        f16_to_f32_loop(s + r * src_ld, dst + r * cols, cols);
    }
  });
}

void f32_rows_to_half(const float* src, void* dst, DType dst_dtype, int64_t dst_ld, int64_t rows,
                      int64_t cols) {
  TESSEL_CHECK(is_half(dst_dtype), "f32_rows_to_half: destination is ", dtype_name(dst_dtype),
               ", expected bf16 or f16");
  auto* d = static_cast<uint16_t*>(dst);
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      if (dst_dtype == DType::BF16)
        f32_to_bf16_loop(src + r * cols, d + r * dst_ld, cols);
      else
        f32_to_f16_loop(src + r * cols, d + r * dst_ld, cols);
    }
  });
}

void convert_tensor(const Tensor& src, Tensor& dst) {
  TESSEL_CHECK(src.defined() && dst.defined() && src.numel() == dst.numel(),
               "convert: source and destination must be defined and equally sized, got ",
               src.defined() ? src.numel() : -1, " and ", dst.defined() ? dst.numel() : -1,
               " elements");
  const int64_t n = src.numel();
  const DType from = src.dtype(), to = dst.dtype();
  if (from == to) {
    if (src.data_ptr() != dst.data_ptr()) std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
  } else if (is_half(from) && to == DType::F32) {
    half_to_f32(src.data_ptr(), from, dst.data<float>(), n);
  } else if (from == DType::F32 && is_half(to)) {
    f32_to_half(src.data<float>(), dst.data_ptr(), to, n);
  } else {
    const auto* s = static_cast<const char*>(src.data_ptr());
    auto* d = static_cast<char*>(dst.data_ptr());
    const size_t ss = dtype_size(from), ds = dtype_size(to);
    parallel_for(0, n, kElementGrain, [&](int64_t lo, int64_t hi) {
      convert_elements(s + size_t(lo) * ss, from, d + size_t(lo) * ds, to, size_t(hi - lo));
    });
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu

namespace tessel::kernels::TESSEL_KERNEL_ISA {

void CpuBackend::convert(const Tensor& src, Tensor& dst) {
  cpu::convert_tensor(src, dst);
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
