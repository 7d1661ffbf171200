// SPDX-License-Identifier: Apache-2.0
// Differentiable dtype conversion, the building block of mixed-precision training (Micikevicius
// et al. 2018): the forward runs on 16-bit copies of f32 master weights, and the gradient of each
// copy flows back through the cast into the master's f32 gradient.
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// x converted to `dtype` (round to nearest even into bf16 / f16); x itself when it already has
// that dtype. Backward converts the gradient back to x's dtype.
Tensor cast(const Tensor& x, DType dtype);

}  // namespace tessel::ops
