// SPDX-License-Identifier: Apache-2.0
// Differentiable losses: softmax cross-entropy over class logits, and mean squared error.
// Reductions follow PyTorch's semantics so losses compare directly with it.
#pragma once

#include <cstdint>

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

enum class Reduction { Mean, Sum, None };

// logits [N, V], targets i32/i64 [N]. Rows whose target is ignore_index contribute nothing;
// Mean divides by the number of the other rows (NaN when there are none, as in PyTorch).
// None returns the per-row losses [N] (0 on ignored rows). Losses are stat dtype (f64 for f64
// logits, else f32).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);

// (input - target)^2, reduced; both of the same shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace tessel::ops
