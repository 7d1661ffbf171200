// SPDX-License-Identifier: Apache-2.0
// Validation of a GemmDesc against its operands, shared by the CPU and the reference backends so
// that both reject the same descriptors with the same messages. A descriptor is legal when every
// element it can touch lies inside its tensor: no backend may read or write past an operand.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

// One past the last element of `batch` matrices of rows x cols, row stride ld, batch stride
// `stride` (0 when nothing is touched). Computed in 128 bits so that absurd strides cannot wrap.
inline __int128 gemm_extent(int64_t batch, int64_t stride, int64_t rows, int64_t ld, int64_t cols) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return 0;
  return __int128(batch - 1) * stride + __int128(rows - 1) * ld + cols;
}

inline void check_gemm_operand(std::string_view op, const char* name, const Tensor& t,
                               int64_t batch, int64_t stride, int64_t rows, int64_t ld,
                               int64_t cols, bool trans) {
  TESSEL_CHECK(stride >= 0, op, ": stride_", name, " is ", stride, ", expected >= 0");
  TESSEL_CHECK(rows == 0 || cols == 0 || ld >= cols, op, ": ld", name, " ", ld,
               " is smaller than the stored row width ", cols, " of ", name, " (", rows, " x ",
               cols, ", trans_", name, " ", trans, ")");
  __int128 need = gemm_extent(batch, stride, rows, ld, cols);
  if (need > t.numel()) {
    bool huge = need - 1 > INT64_MAX;
    TESSEL_FAIL(op, ": operand ", name, " has ", t.numel(),
                " elements but the descriptor reaches element ",
                huge ? std::string("beyond 2^63") : std::to_string(int64_t(need - 1)), " (batch ",
                batch, ", stride ", stride, ", ", rows, " x ", cols, ", ld ", ld, ")");
  }
}

inline void check_gemm(std::string_view op, const GemmDesc& d, const Tensor& a, const Tensor& b,
                       const Tensor& c) {
  TESSEL_CHECK(a.defined() && b.defined() && c.defined(), op, ": a, b and c must all be defined");
  TESSEL_CHECK(d.batch >= 0 && d.m >= 0 && d.n >= 0 && d.k >= 0, op,
               ": sizes must be >= 0, got batch ", d.batch, " m ", d.m, " n ", d.n, " k ", d.k);
  TESSEL_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), op, ": dtypes differ: a ",
               dtype_name(a.dtype()), ", b ", dtype_name(b.dtype()), ", c ", dtype_name(c.dtype()));
  // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k when transposed).
  check_gemm_operand(op, "a", a, d.batch, d.stride_a, d.trans_a ? d.k : d.m, d.lda,
                     d.trans_a ? d.m : d.k, d.trans_a);
  check_gemm_operand(op, "b", b, d.batch, d.stride_b, d.trans_b ? d.n : d.k, d.ldb,
                     d.trans_b ? d.k : d.n, d.trans_b);
  check_gemm_operand(op, "c", c, d.batch, d.stride_c, d.m, d.ldc, d.n, false);
  // Batch entries of C must not overlap: each is written, and parallel writers would race. Two
  // layouts qualify: entries one after another, or side by side within each row (per-head
  // outputs written straight into a [tokens, heads, dim] tensor).
  if (d.batch > 1 && d.m > 0 && d.n > 0) {
    int64_t span = (d.m - 1) * d.ldc + d.n;
    bool after = d.stride_c >= span;
    bool beside = d.stride_c >= d.n && (d.batch - 1) * d.stride_c + d.n <= d.ldc;
    TESSEL_CHECK(after || beside, op, ": stride_c ", d.stride_c,
                 " makes the batch entries of C overlap: expected >= ", span,
                 " (one after another) or batch entries side by side within ldc ", d.ldc, " (m ",
                 d.m, ", n ", d.n, ")");
  }
  TESSEL_CHECK(std::isfinite(d.alpha) && std::isfinite(d.beta), op,
               ": alpha and beta must be finite, got alpha ", d.alpha, " beta ", d.beta);
}

}  // namespace tessel::kernels
