// SPDX-License-Identifier: Apache-2.0
// Differentiable reductions over a set of dims (empty: all dims). Without keepdim the reduced dims
// are dropped, so reducing everything gives a 0-d scalar.
#pragma once

#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

Tensor sum(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
// The gradient of max / min is shared equally among the elements that attain it.
Tensor max(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor min(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);

}  // namespace tessel::ops
