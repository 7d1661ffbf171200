// SPDX-License-Identifier: Apache-2.0
// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", 2019) over named
// parameters in two groups: weights of two or more dimensions decay, biases and norm weights
// (one dimension) do not, as GPT-2 recipes do. Moments are f32 (f64 for f64 parameters), kept per
// parameter and saved by name so a checkpoint restores the exact state. The arithmetic is the
// kernel backend's adamw, which matches torch.optim.AdamW.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessel/tensor/tensor.h"
#include "tessel/train/optim/optimizer.h"

namespace tessel::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;  // applied to the decay group only
};

class AdamW : public Optimizer {
 public:
  // `params` are leaf tensors that require grad; their .grad() is read at step().
  AdamW(NamedTensors params, const AdamWOptions& options);

  std::string_view name() const override { return "AdamW"; }
  // Every defined gradient, whole.
  std::vector<GradSpan> gradients() const override;
  std::vector<GradSpan> parameter_gradients() const override;
  // One update with learning rate `lr`; increments step_count() first (bias correction uses it).
  // A parameter whose .grad() is undefined is skipped (its moments are unchanged).
  void step(double lr) override;
  int64_t step_count() const override { return step_; }

  // Whether the parameter named `name` (shape `shape`) is in the decay group.
  static bool decays(const std::string& name, const Shape& shape);
  int64_t decay_count() const;     // elements in the decay group
  int64_t no_decay_count() const;  // elements in the other group

  // "exp_avg.<name>" and "exp_avg_sq.<name>" for every parameter, in parameter order; the step
  // count travels separately (state.json).
  NamedTensors state() const;
  // Restores moments saved by state(); one Error lists every missing, unexpected or mis-shaped
  // name. Sets the step count.
  void load_state(const NamedTensors& state, int64_t step);
  // For checkpoints that restore the moments in place (state()'s tensors).
  void set_step_count(int64_t step);
  // Bytes of optimizer state (both moments).
  int64_t state_bytes() const override;

  const NamedTensors& params() const { return params_; }

 private:
  NamedTensors params_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  std::vector<bool> decay_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

}  // namespace tessel::train
