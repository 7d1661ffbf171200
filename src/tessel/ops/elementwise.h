// SPDX-License-Identifier: Apache-2.0
// Differentiable element-wise arithmetic: binary ops with NumPy broadcasting (backward sums the
// gradient over the broadcast dims), scalar forms, and the unary math functions.
#pragma once

#include "tessel/kernels/backend.h"
#include "tessel/tensor/tensor.h"

namespace tessel::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

Tensor add(const Tensor& x, double s);
Tensor sub(const Tensor& x, double s);
Tensor mul(const Tensor& x, double s);
Tensor div(const Tensor& x, double s);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);

// Any unary kernel op, differentiable (alpha parameterises Scale / AddScalar / Pow).
Tensor unary(kernels::UnaryOp op, const Tensor& x, double alpha = 0.0);

}  // namespace tessel::ops
