// SPDX-License-Identifier: Apache-2.0
// Differentiable activation functions. gelu is the tanh approximation (GPT-2, HF "gelu_new");
// silu is x * sigmoid(x) (SwiGLU in LLaMA).
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);

}  // namespace tessel::ops
