// SPDX-License-Identifier: Apache-2.0
// In-place parameter initialisers driven by a tessel::Generator, so a model built from the same
// seed has the same weights on any thread count.
#pragma once

#include "tessel/core/rng.h"
#include "tessel/tensor/tensor.h"

namespace tessel::nn::init {

// N(mean, std^2) draws (generated in f32, converted to t's dtype).
void normal_(Tensor& t, double std, Generator* generator = nullptr, double mean = 0.0);
void zeros_(Tensor& t);
void ones_(Tensor& t);

}  // namespace tessel::nn::init
