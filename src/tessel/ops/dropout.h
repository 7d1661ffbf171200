// SPDX-License-Identifier: Apache-2.0
// Differentiable inverted dropout (Srivastava et al. 2014): zero each element with probability p
// and scale the rest by 1/(1-p). The mask is a function of the generator's (seed, offset), never
// stored: backward and activation recomputation regenerate it.
#pragma once

#include "tessel/core/rng.h"
#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// Returns x itself when !training or p == 0. Draws numel(x) numbers from `generator` (default:
// the process-wide one).
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* generator = nullptr);

}  // namespace tessel::ops
