// SPDX-License-Identifier: Apache-2.0
// The one optimizer interface of the trainer: AdamW over whole parameters (train/optim/adamw.h) and
// AdamW over ZeRO shards (sharded_adamw.h), later an offloaded AdamW. A step is always
//   norm over gradients() -> scale_spans(gradients(), 1/k and clipping) -> step(lr),
// whatever the optimizer holds; what each one keeps for checkpoints stays its own.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tessel/train/optim/grad_norm.h"

namespace tessel::train {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string_view name() const = 0;  // "AdamW", "ZeRO-2 AdamW"
  // What step() reads: this rank's gradients (whole, or its shards of the averaged buckets), the
  // spans that the step's scaling multiplies.
  virtual std::vector<GradSpan> gradients() const = 0;
  // The same elements, one span per parameter part this rank holds (GradSpan::param set): what
  // the global norm groups by how each axis shares a parameter.
  virtual std::vector<GradSpan> parameter_gradients() const = 0;
  // Multiplies the gradients step() reads by `factor` (1/k, clipping, loss-scale removal); an
  // optimizer whose gradients are not resident (offload) applies it during step().
  virtual void scale_gradients(double factor) { scale_spans(gradients(), factor); }
  // One update at learning rate `lr`; step_count() grows by one first (bias correction uses it).
  virtual void step(double lr) = 0;
  virtual int64_t step_count() const = 0;
  virtual int64_t state_bytes() const = 0;  // this rank's optimizer state (moments)
};

}  // namespace tessel::train
