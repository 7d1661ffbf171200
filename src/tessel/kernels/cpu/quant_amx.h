// SPDX-License-Identifier: Apache-2.0
// Q8_0 and Q4_0 weights times activation rows on AMX-INT8 tiles (quant_amx.cpp says how; the switch
// is kernels/quant_amx.h). Called by the avx512 set's quantized matmul when quant_amx_enabled().
#pragma once

#include <cstdint>

namespace tessel::kernels::cpu {

// y[m, n] = x[m, k] W[n, k]^T for Q8_0 rows of W (row_bytes apart, k a multiple of 32) and x
// already rounded to int8 blocks (xq: m rows of k codes; dx: m rows of k / 32 scales). Tasks own
// whole groups of 16 weight rows, at least group_grain of them.
void q8_0_amx_matmul(int64_t m, int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq,
                     const float* dx, const uint8_t* w, float* y, int64_t group_grain);
// The same for Q4_0 rows (18-byte blocks), whose codes u - 8 the tiles take as signed bytes.
void q4_0_amx_matmul(int64_t m, int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq,
                     const float* dx, const uint8_t* w, float* y, int64_t group_grain);

}  // namespace tessel::kernels::cpu
