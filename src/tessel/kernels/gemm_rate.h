// SPDX-License-Identifier: Apache-2.0
// The rate of one dense f32 GEMM shape through the CPU backend: the machine's GEMM peak that
// `tessel bench peak` reports and that training measures MFU against, from one measurement.
#pragma once

#include <cstdint>

namespace tessel::kernels {

// GFLOP/s of the median of C = op(A) op(B) products ([m, k] x [k, n], transposed as asked) run
// for about `budget_s` seconds after a warm-up.
double gemm_gflops(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, double budget_s);

}  // namespace tessel::kernels
