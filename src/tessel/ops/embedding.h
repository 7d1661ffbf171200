// SPDX-License-Identifier: Apache-2.0
// Differentiable embedding lookup (a gather of weight rows by token id).
// Token and position embeddings of the models are built on it.
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// weight [V, C], ids i32/i64 of any shape -> [ids.shape..., C]. Only weight gets a gradient;
// rows looked up several times receive the sum of their gradients.
Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace tessel::ops
