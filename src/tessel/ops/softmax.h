// SPDX-License-Identifier: Apache-2.0
// Differentiable softmax and log-softmax over the last dim.
// Attention has its own fused kernel; these serve classifier heads and tests.
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);

}  // namespace tessel::ops
