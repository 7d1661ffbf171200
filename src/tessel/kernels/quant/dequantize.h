// SPDX-License-Identifier: Apache-2.0
// Scalar reference dequantization of the GGUF weight formats (quant_format.h): what a GGUF loader
// calls to widen a tensor, and what the kernels (kernels/cpu/quant_matmul.cpp) are tested
// against. The f32 version computes each weight as ggml's dequantizers do (the block scale times
// the sub-block scale in f32, then times the code); the f64 version gives the exact value of the
// formula, which is what the fp64 reference matmul uses.
#pragma once

#include <cstdint>
#include <span>

#include "tessel/kernels/quant/quant_format.h"
#include "tessel/tensor/tensor.h"

namespace tessel::kernels::quant {

// One row of k weights (k a multiple of block_elements(type), else an Error naming k and the block
// size) from row_bytes(type, k) bytes at `src` (no alignment needed).
void dequantize_row(QuantType type, const void* src, float* dst, int64_t k);
void dequantize_row(QuantType type, const void* src, double* dst, int64_t k);

// Row `row` of an n x k matrix of `type` at `matrix`: dequantize_row of that row, for every
// type including Q4_0x4, whose rows are spread over their groups of four (q4_0_groups.h).
void dequantize_matrix_row(QuantType type, const void* matrix, int64_t n, int64_t k, int64_t row,
                           float* dst);
void dequantize_matrix_row(QuantType type, const void* matrix, int64_t n, int64_t k, int64_t row,
                           double* dst);

// A tensor's raw bytes (as stored in a GGUF file) -> an f32 tensor of `shape` (tessel order: the
// last dim is the row, ggml's ne[0]). `bytes` must hold exactly rows * row_bytes(type, row).
Tensor dequantize(QuantType type, std::span<const uint8_t> bytes, const Shape& shape);

// The operand Backend::quant_matmul takes for an [n, k] weight stored in `type`: an i8 tensor
// [n, row_bytes(type, k)] holding a copy of `bytes` (a GGUF tensor's data, whose ne[0] is k and
// ne[1] is n). An Error names the sizes when `bytes` is not exactly that long.
Tensor quantized_weight(QuantType type, std::span<const uint8_t> bytes, int64_t n, int64_t k);

}  // namespace tessel::kernels::quant
