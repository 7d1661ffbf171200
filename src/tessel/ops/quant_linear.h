// SPDX-License-Identifier: Apache-2.0
// Inference-only products and lookups with a weight matrix kept in a GGUF weight format
// (kernels/quant/quant_format.h): the matrix stays as its raw blocks, an i8 tensor
// [rows, row_bytes(type, cols)] (usually a view of the mapped GGUF file), and is never widened
// as a whole. These record no backward: asking for a gradient through them is an Error, since a
// quantized matrix cannot be trained (train from the f32 / f16 / bf16 model instead).
#pragma once

#include <cstdint>

#include "tessel/kernels/quant/quant_format.h"
#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// Rows of activations per Backend::quant_matmul call: longer inputs (prompts) are split into
// chunks of this many rows, each reading the weight in place.
inline constexpr int64_t kQuantMatmulRows = 64;
// The same for Q8_0, Q4_K, Q5_K and Q6_K, whose prompts run as register tiles that block the
// activations for the cache themselves (kernels/cpu/quant_q8_tiles.h, quant_k_tiles.h): each call
// reads the weight from memory about once, so fewer, longer calls read it fewer times.
inline constexpr int64_t kQuantMatmulTiledRows = 1024;

// y[..., out] = x[..., in] W^T (+ bias) for W [out, in] stored as `weight` (i8
// [out, row_bytes(type, in)]). x is f32; y is f32.
Tensor quant_linear(const Tensor& x, kernels::quant::QuantType type, const Tensor& weight,
                    int64_t in_features, const Tensor& bias = Tensor());

// y [rows, out] = x [rows, in] W^T for W stored as `weight` (i8 [out, row_bytes(type, in)]), both
// already checked: Backend::quant_matmul over chunks of at most kQuantMatmulRows rows
// (kQuantMatmulTiledRows for Q8_0), each reading the weight in place. What quant_linear and
// quant_grouped_linear (per group) run.
void quant_matmul_rows(kernels::quant::QuantType type, const Tensor& x, const Tensor& weight,
                       Tensor& y);

// out[ids..., :] = W[ids, :] for W [num, dim] stored as `weight` (i8 [num, row_bytes(type, dim)]):
// only the looked-up rows are dequantized, to f32.
Tensor quant_embedding(kernels::quant::QuantType type, const Tensor& weight, int64_t dim,
                       const Tensor& ids);

}  // namespace tessel::ops
