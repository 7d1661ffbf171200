// SPDX-License-Identifier: Apache-2.0
// The grouped product of a mixture-of-experts layer (ops/grouped_linear.h) with the experts'
// stacked weight kept in a GGUF weight format: llama.cpp's stacked expert tensors
// (blk.N.ffn_*_exps) as their raw blocks, i8 [groups, out, row_bytes(type, in)], usually a view
// of the mapped file. Each group's rows multiply that group's blocks in place through the same
// Backend::quant_matmul as quant_linear (so a group's rows get bitwise the result quant_linear
// gives them with that expert's matrix); a group that received no row reads none of its bytes,
// so a decode step reads only its chosen experts. Inference-only, like quant_linear.
#pragma once

#include <cstdint>

#include "tessel/kernels/quant/quant_format.h"
#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// x [M, in] (f32) whose rows form G groups by offsets (i64 [G + 1], from 0 to M, non-decreasing)
// times each group's matrix W_g [out, in], stored as weight[g] (i8 [G, out, row_bytes(type, in)])
// -> y [M, out] (f32).
Tensor quant_grouped_linear(const Tensor& x, kernels::quant::QuantType type, const Tensor& weight,
                            int64_t in_features, const Tensor& offsets);

}  // namespace tessel::ops
