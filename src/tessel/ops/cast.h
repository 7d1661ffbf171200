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

// cast(x, kept.dtype()) whose values were written into `kept` ahead of time (a 16-bit weight copy
// kept between steps, as memory offload keeps one in chunks): returns a handle on kept's bytes
// (nothing is computed or read now, so the bytes may be elsewhere until used) with cast's
// backward, which converts the gradient into x's dtype for x. Same shape, floating dtypes.
Tensor cast_kept(const Tensor& x, const Tensor& kept);

}  // namespace tessel::ops
