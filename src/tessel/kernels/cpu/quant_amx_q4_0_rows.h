// SPDX-License-Identifier: Apache-2.0
// The decode step (fewer than 4 activation rows) of Q4_0's AMX-INT8 product (quant_amx.cpp): one
// group of 16 weight rows in the tiles' f32 order, in AVX-512 VNNI (quant_amx_q4_0_rows.cpp says
// how). Called by quant_amx.cpp's few_rows only.
#pragma once

#include <cstdint>

namespace tessel::kernels::cpu {

// y[i * ldy + c] for activation rows i < m (1..3; codes k apart, scales dx k / 32 apart, xbias =
// 8 x each block's sum of codes) and the `cols` (1..16) Q4_0 rows of W at w (row_bytes apart):
// for each output, per block g in order, acc = fma(f32(S_g), f32(d_g) * dx_g, acc) from +0, S_g
// the exact integer sum of (u - 8) x over the block.
void q4_0_amx_few_rows(int64_t m, int64_t k, int64_t row_bytes, const int8_t* xq, const float* dx,
                       const int32_t* xbias, const uint8_t* w, int cols, float* y, int64_t ldy);

}  // namespace tessel::kernels::cpu
