// SPDX-License-Identifier: Apache-2.0
// The batch-invariant product C = alpha A B^T + beta C (A [m, k] row-major, B [n, k]: a linear
// layer's weight) that the CPU backend runs while kernels::batch_invariant() is on
// (batch_invariant.h). Each output element is one fixed-shape dot product over k
// (gemm_invariant_tiles.h), so a row of C has the same bits whatever m, n, the other rows and the
// thread count are. bf16 and f16 are widened to f32 exactly (in registers for a few rows, into
// buffers for more), so they get the f32 tiles' bits on the widened values.
#pragma once

#include <functional>

#include "tessel/kernels/backend.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

// Whether the batch-invariant kernel takes `d`: A not transposed, B transposed, k > 0.
bool invariant_gemm_fits(const GemmDesc& d);
// The product for f32, bf16 or f16 operands (validated by the caller; m, n > 0).
void invariant_gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, Tensor& c);

// y[i, j] = dot(x row i, W row j) for f32 x [m, k] (rows lda apart) and a weight whose rows
// [j0, j1) `widen` writes as f32 into a [j1 - j0, k] buffer (the quantized matmul's F16 / BF16
// weights); y [m, n] rows ldy apart. The same per-element order as invariant_gemm on f32.
using WidenRows = std::function<void(int64_t j0, int64_t j1, float* dst)>;
void invariant_matmul_widened(int64_t m, int64_t n, int64_t k, const float* x, int64_t lda,
                              const WidenRows& widen, float* y, int64_t ldy);

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
