// SPDX-License-Identifier: Apache-2.0
// Differentiable grouped linear layer: the experts of a mixture-of-experts layer (GShard, Switch,
// Mixtral; grouped as in MegaBlocks), each applied to the contiguous rows of the tokens it
// received, one GEMM per expert and no padding to a capacity.
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// x [M, in] whose rows form G groups by offsets (i64 [G + 1], from 0 to M, non-decreasing; group g
// owns rows offsets[g] .. offsets[g + 1]) times each group's weight [G, out, in] (PyTorch's linear
// layout per group) -> [M, out]. x and weight get gradients (dx by the rows form of the grouped
// GEMM, dweight by its weight-gradient form); an expert that received no row gets a zero gradient.
Tensor grouped_linear(const Tensor& x, const Tensor& weight, const Tensor& offsets);

}  // namespace tessel::ops
