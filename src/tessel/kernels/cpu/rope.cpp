// SPDX-License-Identifier: Apache-2.0
// CPU rotary position embedding (rotate_half layout, backend.h): parallel over tokens; each
// token's cos / sin table row is read once and applied to all of its heads, the D/2 pairs of a
// head in one vectorised loop. bf16 / f16 tokens are widened to f32 a row at a time in the task
// (no f32 copy of the whole tensor), rotated with the f32 tables and rounded back once.
#include <vector>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/loops.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

// y = rotate(x) for `heads` consecutive head vectors of `dim` elements; y may be x. Each
// iteration reads the pair (i, half + i) before writing the same pair, so the loop carries no
// dependence even in place.
template <typename T, bool kInverse>
void rotate_heads(const T* x, T* y, const T* c, const T* s, int64_t heads, int64_t dim) {
  const int64_t half = dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    const T* x1 = x + h * dim;
    const T* x2 = x1 + half;
    T* y1 = y + h * dim;
    T* y2 = y1 + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      T a = x1[i], b = x2[i], ci = c[i], si = kInverse ? -s[i] : s[i];
      y1[i] = a * ci - b * si;
      y2[i] = b * ci + a * si;
    }
  }
}

template <typename T, bool kInverse>
void rope_rows(const RopeShape& r, const T* x, const T* cos, const T* sin, const IndexView& pos,
               T* out) {
  const int64_t row = r.heads * r.dim, half = r.dim / 2;
  parallel_for(0, r.tokens, cpu::row_grain(row), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const int64_t p = pos[n];
      rotate_heads<T, kInverse>(x + n * row, out + n * row, cos + p * half, sin + p * half, r.heads,
                                r.dim);
    }
  });
}

// 16-bit x: each task widens one token row into its own f32 buffer, rotates it there and rounds
// it into out (the conversions run on the task's thread: nested parallel_for stays serial).
template <bool kInverse>
void rope_half_rows(const RopeShape& r, const Tensor& x, const float* cos, const float* sin,
                    const IndexView& pos, Tensor& out) {
  const int64_t row = r.heads * r.dim, half = r.dim / 2;
  const auto* xs = static_cast<const uint16_t*>(x.data_ptr());
  auto* os = static_cast<uint16_t*>(out.data_ptr());
  const DType dt = x.dtype();
  parallel_for(0, r.tokens, cpu::row_grain(row), [&](int64_t lo, int64_t hi) {
    std::vector<float> buf(static_cast<size_t>(row));
    for (int64_t n = lo; n < hi; ++n) {
      const int64_t p = pos[n];
      cpu::half_to_f32(xs + n * row, dt, buf.data(), row);
      rotate_heads<float, kInverse>(buf.data(), buf.data(), cos + p * half, sin + p * half, r.heads,
                                    r.dim);
      cpu::f32_to_half(buf.data(), os + n * row, dt, row);
    }
  });
}

}  // namespace

void CpuBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin,
                      const Tensor& positions, bool inverse, Tensor& out) {
  const RopeShape r = validate_rope(*this, x, cos, sin, positions, out);
  const IndexView pos(positions);
  if (cpu::is_half(x.dtype())) {
    if (inverse)
      rope_half_rows<true>(r, x, cos.data<float>(), sin.data<float>(), pos, out);
    else
      rope_half_rows<false>(r, x, cos.data<float>(), sin.data<float>(), pos, out);
    return;
  }
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (inverse)
      rope_rows<T, true>(r, x.data<T>(), cos.data<T>(), sin.data<T>(), pos, out.data<T>());
    else
      rope_rows<T, false>(r, x.data<T>(), cos.data<T>(), sin.data<T>(), pos, out.data<T>());
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
