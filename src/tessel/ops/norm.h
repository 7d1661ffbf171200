// SPDX-License-Identifier: Apache-2.0
// Differentiable normalisations over the last dim: LayerNorm (Ba et al. 2016) and RMSNorm
// (Zhang & Sennrich 2019).
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// (x - mean) / sqrt(var + eps) * weight + bias; weight and bias [C] may each be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// x / sqrt(mean(x^2) + eps) * weight, weight [C].
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

}  // namespace tessel::ops
