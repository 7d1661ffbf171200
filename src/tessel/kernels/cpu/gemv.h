// SPDX-License-Identifier: Apache-2.0
// The decode-step product: a few rows of activations times a weight matrix stored [n, k]
// (C = alpha A B^T + beta C with m <= kGemvMaxRows). Such a product reads every weight once and
// does two FLOPs per weight, so it is bound by memory bandwidth, not arithmetic: the kernel
// streams B's rows, several at a time with independent accumulators, split over the pool.
#pragma once

#include "tessel/kernels/backend.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

inline constexpr int64_t kGemvMaxRows = 4;

// Whether small_m_gemm takes `d` (f32, A not transposed, B transposed, m <= kGemvMaxRows).
bool small_m_gemm_fits(const GemmDesc& d);
void small_m_gemm(const GemmDesc& d, const float* a, const float* b, float* c);

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
