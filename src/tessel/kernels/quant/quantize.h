// SPDX-License-Identifier: Apache-2.0
// Scalar quantizers for the GGUF weight formats (quant_format.h): how tessel writes its own GGUF
// files and test weights. Q8_0 and Q4_0 follow ggml's reference rules exactly (so a row
// quantizes to the same bytes ggml writes); F16 / BF16 round to nearest even. Q4_K and Q6_K use
// a simpler scale search than ggml's (quantize_k.cpp says which, docs/KERNELS.md what it costs):
// valid blocks that any GGUF reader decodes, with a somewhat larger error. Q5_K is Q4_K's search
// with 32 codes. Int8 (tessel's per-row format) takes max|x| / 127 per row.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/kernels/quant/quant_format.h"

namespace tessel::kernels::quant {

// Quantizes one row of k weights (k a multiple of block_elements(type), else an Error naming k
// and the block size) into row_bytes(type, k) bytes at `dst`.
void quantize_row(QuantType type, const float* src, void* dst, int64_t k);

// Int8 (tessel's per-row format): max|x| of a row of k weights, and a slice of k weights of a
// longer row quantized with the whole row's max|x| `amax` (an Error when the slice holds a larger
// one). A tensor-parallel rank holding columns of a row-parallel layer quantizes its slice this
// way, so its codes and scale are those of the whole row's quantization.
float int8_row_amax(const float* src, int64_t k);
void quantize_int8_slice(const float* src, void* dst, int64_t k, float amax);

// rows x k weights -> rows * row_bytes(type, k) bytes.
std::vector<uint8_t> quantize_rows(QuantType type, const float* src, int64_t rows, int64_t k);

// The k-quant rows (quantize_k.cpp).
void quantize_row_q4_k(const float* src, void* dst, int64_t k);
void quantize_row_q5_k(const float* src, void* dst, int64_t k);
void quantize_row_q6_k(const float* src, void* dst, int64_t k);

}  // namespace tessel::kernels::quant
