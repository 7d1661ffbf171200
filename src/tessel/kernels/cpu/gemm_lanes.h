// SPDX-License-Identifier: Apache-2.0
// The serving step's product of several rows against a transposed weight, C = alpha A W^T +
// beta C (A [m, k], W [n, k]), with the rows of A across the vector lanes: C^T = W A^T, so each
// weight element is broadcast once and multiplies every row of A in one FMA. A dot-product tile
// (gemm_invariant_tiles.h) loads a vector of A per row and a vector of W per column for each
// step of k and re-reads both from L2 once a few rows no longer fit a register tile; here A's
// transposed columns (one vector per lane group) and one 4-byte weight per FMA are all a step
// reads, so 8 to 48 rows run near the FMA rate while W streams from memory once (the
// outer-product form of a BLIS-style micro-kernel, with W read in place instead of packed: it is
// read once). Each element is summed over k in another order than the dot-product tiles', so
// batch-invariant mode never takes this path.
#pragma once

#include "tessel/kernels/backend.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

// Whether lanes_gemm takes `d`: the avx2 / avx512 sets, A not transposed, W transposed, k > 0 and
// from half a vector's lanes of rows to three vectors' (avx512 8-48, avx2 4-24).
bool lanes_gemm_fits(const GemmDesc& d);
// f32 operands, validated by the caller.
void lanes_gemm(const GemmDesc& d, const float* a, const float* w, float* c);

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
