// SPDX-License-Identifier: Apache-2.0
// Activation checkpointing (Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016):
// run a block without recording and keep only its inputs; in backward, run it again with
// recording and back-propagate through the recomputed graph.
#pragma once

#include <functional>
#include <vector>

#include "tessel/core/rng.h"
#include "tessel/tensor/tensor.h"

namespace tessel::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// Returns fn(inputs). The recomputation restores the state the default generator (and any
// `generators` given) had before the first run, so dropout masks replay exactly and gradients
// are bitwise those of the uncheckpointed block. Parameters that fn uses without taking them as
// inputs get their gradients (and fire their hooks) during the recomputation's backward. When a
// tensor is used both inside and outside the block, its gradient contributions may be summed in
// a different order than without checkpointing (bitwise equality then holds up to rounding).
// fn must depend on nothing but its inputs, the parameters it uses and the generators.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Generator*>& generators = {});

// Single-output form.
Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                  const std::vector<Tensor>& inputs,
                  const std::vector<Generator*>& generators = {});

}  // namespace tessel::autograd
