// SPDX-License-Identifier: Apache-2.0
// Differentiable matrix products: linear (PyTorch's convention, weight [out, in]) and matmul.
// Both run as one GEMM forward and one per input gradient in backward.
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// x [..., in] @ weight[out, in]^T + bias[out] -> [..., out]; bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// a [..., m, k] @ b [..., k, n] -> [..., m, n]. Either both have the same batch dims, or b is
// 2-D [k, n] and is shared by every batch entry of a.
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace tessel::ops
