// SPDX-License-Identifier: Apache-2.0
// Global gradient-norm clipping (Pascanu et al. 2013) as torch.nn.utils.clip_grad_norm_ does it:
// the L2 norm over every gradient together, accumulated in f64; when it exceeds max_norm every
// gradient is scaled by max_norm / (norm + 1e-6). A non-finite norm is returned as is and nothing
// is scaled, so the caller can skip the step. One process's parameters; the trainer's norm over a
// layout is optim/grad_norm.h's, which these are built on.
#pragma once

#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::train {

// Sum of squares of every element of the defined gradients of `params` (f64 accumulation).
double grad_square_sum(const std::vector<Tensor>& params);
// sqrt(grad_square_sum(params)).
double grad_norm(const std::vector<Tensor>& params);
// Multiplies every defined gradient by `factor` in place.
void scale_grads(const std::vector<Tensor>& params, double factor);
// Computes the global norm, clips to max_norm (> 0) when it is finite and larger, and returns
// the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace tessel::train
