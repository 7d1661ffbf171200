// SPDX-License-Identifier: Apache-2.0
// Mixed-precision forward (Micikevicius et al. 2018, "Mixed Precision Training"): for as long as
// a LowPrecisionScope lives, the layers of a model compute with 16-bit copies of their f32
// parameters. The copies come from ops::cast, so backward carries each copy's gradient into the
// f32 master's gradient; the masters, their gradients and the optimizer state stay f32.
#pragma once

#include <utility>
#include <vector>

#include "tessel/nn/module.h"

namespace tessel::nn {

class LowPrecisionScope {
 public:
  // Swaps the parameter handles of every Linear, Embedding, LayerNorm and RMSNorm under `root`
  // for `dtype` casts (one cast per distinct tensor, so tied weights stay tied). f32 and f64 leave
  // the model as it is. The scope must outlive the backward pass when blocks recompute their
  // forward: the recomputation reads the same copies.
  LowPrecisionScope(Module& root, DType dtype);
  ~LowPrecisionScope();  // puts the masters back
  LowPrecisionScope(const LowPrecisionScope&) = delete;
  LowPrecisionScope& operator=(const LowPrecisionScope&) = delete;

 private:
  std::vector<std::pair<Tensor*, Tensor>> swapped_;  // layer member, master handle
};

}  // namespace tessel::nn
