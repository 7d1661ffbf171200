// SPDX-License-Identifier: Apache-2.0
// Differentiable shape ops. reshape is a view (free); the others copy, like their Tensor-method
// counterparts, and record how to route the gradient back.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// One size may be -1 (inferred).
Tensor reshape(const Tensor& x, std::span<const int64_t> sizes);
Tensor reshape(const Tensor& x, std::initializer_list<int64_t> sizes);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x);

Tensor transpose(const Tensor& x, int dim0, int dim1);
Tensor permute(const Tensor& x, const std::vector<int>& dims);
// [start, end) along dim.
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end);
Tensor concat(const std::vector<Tensor>& xs, int dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim);
// torch.chunk's rule: pieces of ceil(size / chunks), the last ones may be short.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim);

}  // namespace tessel::ops
