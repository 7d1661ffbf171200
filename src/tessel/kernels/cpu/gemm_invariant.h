// SPDX-License-Identifier: Apache-2.0
// The batch-invariant product C = alpha A B^T + beta C (A [m, k] row-major, B [n, k]: a linear
// layer's weight) that the CPU backend runs while kernels::batch_invariant() is on
// (batch_invariant.h). Each output element is one fixed-shape dot product over k
// (gemm_invariant_tiles.h), so a row of C has the same bits whatever m, n, the other rows and the
// thread count are. bf16 and f16 are widened to f32 exactly (in registers for a few rows, into
// buffers for more), so they get the f32 tiles' bits on the widened values.
#pragma once

#include "tessel/kernels/backend.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

// Whether the batch-invariant kernel takes `d`: A not transposed, B transposed, k > 0.
bool invariant_gemm_fits(const GemmDesc& d);
// The product for f32, bf16 or f16 operands (validated by the caller; m, n > 0).
void invariant_gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, Tensor& c);

// y[i, j] = dot(x row i, W row j) for f32 x [m, k] (rows lda apart) and a bf16 / f16 weight W
// [n, k] (`wt`; rows ldw elements apart), y [m, n] rows ldy apart: the quantized matmul's F16 /
// BF16 weights. W is read in place and widened in registers for a few rows of x (decoding), a
// block of rows at a time into f32 buffers from there on; either way each element gets the bits of
// invariant_gemm on f32 copies, so the product is batch-invariant in every mode.
void invariant_matmul_half(int64_t m, int64_t n, int64_t k, const float* x, int64_t lda, DType wt,
                           const uint16_t* w, int64_t ldw, float* y, int64_t ldy);

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
