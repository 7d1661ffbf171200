// SPDX-License-Identifier: Apache-2.0
// Mixed-precision training as a strategy of the step (Micikevicius et al. 2018): f32 master
// weights and f32 AdamW state; each micro-batch runs on 16-bit copies of the weights
// (nn::LowPrecisionScope) and keeps its activations in 16 bits, the loss in f32. fp16 adds dynamic
// loss scaling (LossScaler): backward starts from loss * scale, the trainer's one scaling pass
// divides it back out, and an overflow skips the step on every rank and halves the scale.
// Overflow skips are not "bad steps": they never count toward train.max_bad_steps.
//
// Every layout: tensor parallelism reads its pieces through the same layer members the copies
// replace; a pipeline step keeps one set of copies from its first forward to its last backward
// (the micro-batches interleave); ZeRO-3 makes a unit's copies after its gather (zero3.h). The
// overflow decision is agreed over every axis.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/nn/autocast.h"
#include "tessel/nn/module.h"
#include "tessel/parallel/zero/zero3.h"
#include "tessel/train/layout.h"
#include "tessel/train/optim/loss_scaler.h"
#include "tessel/train/strategy/axis_strategy.h"

namespace tessel::train {

// train.precision ("fp32", "bf16", "fp16") as the compute dtype; Error for anything else.
DType compute_dtype_of(const std::string& precision);

struct PrecisionSetup {
  std::string precision;  // "bf16" or "fp16"
  double loss_scale_init = 65536;
  int64_t loss_scale_window = 1000;
  std::vector<nn::Module*> modules;  // what the copies cover (this rank's stages)
  // ZeRO-3: copies wait for each unit's gather (the dense partition, and the experts' under --ep).
  std::vector<parallel::Zero3Parameters*> zero3;
  TrainLayout layout;  // the axes an overflow is agreed over
  std::function<void(const std::string&)> print;
};

class PrecisionStrategy : public AxisStrategy {
 public:
  explicit PrecisionStrategy(PrecisionSetup setup);

  std::string name() const override;
  void begin_step() override;
  std::shared_ptr<void> micro_batch_scope() override;
  Tensor loss_for_backward(const Tensor& loss) override;
  // fp16: unscales record.grad_norm; true when the gradients overflowed on any rank.
  bool skip_update(StepRecord& record, bool local_nonfinite) override;

  DType compute_dtype() const { return dtype_; }
  // Memory offload: the copies are kept in chunks between steps (OffloadStrategy::kept_copies),
  // not made per micro-batch; the scope takes each when its unit's forward starts (as ZeRO-3's
  // after its gather), handed to `set_scope` for the micro-batch (null after it), so each cast's
  // backward runs with its unit's backward and the unit's chunks are released in turn.
  void set_kept_copies(nn::LowPrecisionScope::Kept kept,
                       std::function<void(nn::LowPrecisionScope*)> set_scope) {
    kept_ = std::move(kept);
    set_scope_ = std::move(set_scope);
  }
  double step_scale() const { return step_scale_; }  // the loss scale of this step's backward
  std::string state_json() const;                    // the loss scaler's state, or "null"
  void restore_state(const std::string& json);

 private:
  PrecisionSetup setup_;
  DType dtype_;
  std::unique_ptr<LossScaler> scaler_;  // fp16 only
  nn::LowPrecisionScope::Kept kept_;
  std::function<void(nn::LowPrecisionScope*)> set_scope_;
  double step_scale_ = 1.0;
};

}  // namespace tessel::train
