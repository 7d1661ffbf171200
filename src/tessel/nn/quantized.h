// SPDX-License-Identifier: Apache-2.0
// Weight matrices kept in a GGUF weight format for inference (a quantized GGUF loaded for
// generate / eval). A layer's weight parameter is rebound in place to the raw blocks, an i8
// tensor [rows, row_bytes(type, cols)] that is usually a view of the mapped file, so every handle
// to it (state_dict, the model's members) sees the blocks and no dequantized copy of the matrix
// exists. A float model's layers can be converted the same way (quantize_matrix, for
// `--weights`). nn::Linear and nn::Embedding dispatch on it (layers.h); training such a layer is an
// Error. dequantize_weight() widens it back to f32 (to re-export a quantized file).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessel/kernels/quant/quant_format.h"
#include "tessel/tensor/tensor.h"

namespace tessel::nn {

class Module;

// Rebinds `weight` (a [rows, cols] parameter) to `blocks` (i8 [rows, row_bytes(type, cols)]);
// an Error names `what`, the sizes and the block size when they do not fit.
void bind_quantized_weight(Tensor& weight, kernels::quant::QuantType type, const Tensor& blocks,
                           int64_t rows, int64_t cols, const std::string& what);
// The same for a stack of matrices (a mixture of experts' [experts, rows, cols] weight, as GGUF
// stores blk.N.ffn_*_exps): blocks i8 [experts, rows, row_bytes(type, cols)].
void bind_quantized_stack(Tensor& weight, kernels::quant::QuantType type, const Tensor& blocks,
                          int64_t experts, int64_t rows, int64_t cols, const std::string& what);
// The blocks of `type` (i8 [rows, row_bytes(type, cols)]) for a float matrix [rows, cols] (f32,
// f16 or bf16): rows are widened to f32 one at a time and quantized over the thread pool, so no
// f32 copy of a 16-bit matrix is made. What `--weights int8|bf16|f16` binds to a float model.
// `int8_row_amax` (Int8 only, one per row): each row's scale comes from that max|x| instead of
// the row's own, for a matrix holding column slices of longer rows (a tensor-parallel rank's
// piece of a row-parallel layer), so its codes are those of the whole rows.
Tensor quantize_matrix(const Tensor& weight, kernels::quant::QuantType type,
                       std::span<const float> int8_row_amax = {});
// max|x| of each row of a float matrix [rows, cols] (f32, f16 or bf16).
std::vector<float> row_abs_max(const Tensor& weight);
// Rebinds a quantized `weight` to its f32 values [rows, cols] (a trainable parameter again).
void dequantize_weight(Tensor& weight, kernels::quant::QuantType type, int64_t rows, int64_t cols);
// Rebinds a quantized stack to its f32 values [experts, rows, cols].
void dequantize_stack(Tensor& weight, kernels::quant::QuantType type, int64_t experts, int64_t rows,
                      int64_t cols);
// The Error a quantized layer gives in training mode.
void check_quantized_inference(const Module& layer, kernels::quant::QuantType type);

}  // namespace tessel::nn
