// SPDX-License-Identifier: Apache-2.0
// Q4_K, Q5_K and Q6_K weights times activation rows on AMX-INT8 tiles (quant_amx_k.cpp and
// quant_amx_q6_k.cpp say how; the switch is kernels/quant_amx.h, shared with Q8_0's tiles).
// Called by the avx512 set's quantized matmul when quant_amx_enabled().
#pragma once

#include <cstdint>

#include "tessel/kernels/quant/quant_format.h"

namespace tessel::kernels::cpu {

// y[m, n] = x[m, k] W[n, k]^T for Q4_K, Q5_K or Q6_K rows of W (row_bytes apart, k a multiple of
// 256), x already rounded to int8 blocks of 32 (xq: m rows of k codes; dx: m rows of k / 32
// scales). Tasks own whole groups of 16 weight rows, at least group_grain of them (and one).
void k_quant_amx_matmul(quant::QuantType type, int64_t m, int64_t n, int64_t k, int64_t row_bytes,
                        const int8_t* xq, const float* dx, const uint8_t* w, float* y,
                        int64_t group_grain);

// The Q4_K (five = false) or Q5_K kernel, with xs32 = dx times each activation block's sum of
// codes (the mins' share).
void q4_k_amx_matmul(bool five, int64_t m, int64_t n, int64_t k, int64_t row_bytes,
                     const int8_t* xq, const float* dx, const float* xs32, const uint8_t* w,
                     float* y, int64_t group_grain);

// The same for Q6_K rows (no mins: its zero point 32 is taken off the codes).
void q6_k_amx_matmul(int64_t m, int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq,
                     const float* dx, const uint8_t* w, float* y, int64_t group_grain);

}  // namespace tessel::kernels::cpu
