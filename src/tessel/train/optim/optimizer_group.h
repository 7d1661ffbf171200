// SPDX-License-Identifier: Apache-2.0
// Several optimizers stepped as one, each over its own disjoint set of parameters: expert
// parallelism under ZeRO partitions the dense parameters over dp and the experts over their own
// data-parallel group (DeepSpeed-MoE's layout), two ZeRO optimizers that the step sees as one. The
// step's norm, scaling and update read every member's gradients.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessel/train/optim/optimizer.h"

namespace tessel::train {

class OptimizerGroup : public Optimizer {
 public:
  // At least one member; every member has taken the same number of steps.
  explicit OptimizerGroup(std::vector<std::unique_ptr<Optimizer>> members);

  std::string_view name() const override { return name_; }
  std::vector<GradSpan> gradients() const override;
  std::vector<GradSpan> parameter_gradients() const override;
  void scale_gradients(double factor) override;
  void step(double lr) override;
  int64_t step_count() const override { return members_.front()->step_count(); }
  int64_t state_bytes() const override;

 private:
  std::vector<std::unique_ptr<Optimizer>> members_;
  std::string name_;
};

}  // namespace tessel::train
