// SPDX-License-Identifier: Apache-2.0
// backward(): reverse-mode differentiation over the recorded graph. Nodes run in a dependency-
// counted topological order (latest-created first among the ready ones); gradients of a tensor
// used several times are summed before its node runs; leaves accumulate into .grad().
#pragma once

#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::autograd {

// Back-propagates from a single-element tensor (the loss) with gradient 1. Without retain_graph
// every node frees what it saved once it has run, and a second backward through it is an Error.
void backward(const Tensor& root, bool retain_graph = false);

// Back-propagates from several outputs with the given gradients (same shapes and dtypes).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph = false);

}  // namespace tessel::autograd
