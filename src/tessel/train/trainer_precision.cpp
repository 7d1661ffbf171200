// SPDX-License-Identifier: Apache-2.0
// Mixed-precision training (Micikevicius et al. 2018): f32 master weights and f32 AdamW state;
// each micro-batch runs its forward on 16-bit casts of the weights (nn::LowPrecisionScope), keeps
// its activations in 16 bits and computes the loss in f32 (the cross-entropy's statistics are
// f32). fp16 adds dynamic loss scaling (LossScaler): backward starts from loss * scale, the
// gradients are unscaled in the trainer's one scaling pass, and an overflow skips the step on
// every rank and halves the scale. Overflow skips are not "bad steps": they never count toward
// train.max_bad_steps.
//
// Every layout: tensor parallelism reads its pieces through the same layer members the copies
// replace; a pipeline step keeps one set of copies of its stages' layers from the first forward to
// the last backward (the micro-batches interleave); ZeRO-3 makes a unit's copies after its gather
// (zero3.h). The overflow decision is agreed over dp, tp and pp.
#include <cmath>
#include <cstdio>

#include "tessel/ops/elementwise.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

void Trainer::setup_precision() {
  const TrainSection& t = config_.train;
  if (t.precision == "bf16") {
    compute_dtype_ = DType::BF16;
  } else if (t.precision == "fp16") {
    compute_dtype_ = DType::F16;
    scaler_ = std::make_unique<LossScaler>(t.loss_scale_init, t.loss_scale_window);
  } else {
    TESSEL_CHECK(t.precision == "fp32", "train.precision = '", t.precision,
                 "', expected fp32, bf16 or fp16");
    compute_dtype_ = DType::F32;
  }
}

std::shared_ptr<void> Trainer::precision_scope() {
  if (compute_dtype_ == DType::F32) return nullptr;
  if (!zero3_) return std::make_shared<nn::LowPrecisionScope>(stage_modules(), compute_dtype_);
  // ZeRO-3: its parameters hold values only while gathered, so their copies wait for the gather.
  parallel::Zero3Parameters* z = zero3_.get();
  auto* scope = new nn::LowPrecisionScope(stage_modules(), compute_dtype_,
                                          [z](const Tensor& p) { return z->holds(p); });
  z->set_low_precision(scope);
  return std::shared_ptr<void>(scope, [z](void* p) {
    z->set_low_precision(nullptr);
    delete static_cast<nn::LowPrecisionScope*>(p);
  });
}

Tensor Trainer::loss_for_backward(const Tensor& loss) {
  step_scale_ = scaler_ ? scaler_->scale() : 1.0;
  return scaler_ ? ops::mul(loss, step_scale_) : loss;
}

bool Trainer::overflow_check(StepRecord& r) {
  if (!scaler_) return false;
  r.loss_scale = step_scale_;
  r.grad_norm /= step_scale_;
  // The global norm carries most overflows to every rank already, but not all: a tp rank other
  // than 0 leaves its replicated parameters out of the norm. The flag, agreed over every axis,
  // makes one rank's non-finite gradient skip the step on all of them.
  bool bad_grads = !std::isfinite(r.grad_norm) || layout_local_nonfinite_;
  if (dp_ || layout_.tp || layout_.pp) {
    Tensor flag = full({1}, bad_grads ? 1.0 : 0.0, DType::I32);
    for (const dist::CommPtr& axis : {layout_.dp, layout_.tp, layout_.pp})
      if (axis) axis->all_reduce(flag, dist::ReduceOp::Max);
    bad_grads = flag.data<int32_t>()[0] != 0;
  }
  // A non-finite loss is a diverging model, not an overflow: the bad-step rule handles it.
  if (!std::isfinite(r.loss)) {
    r.overflow_total = scaler_->overflows();
    return false;
  }
  r.overflow = bad_grads;
  scaler_->update(bad_grads);
  r.overflow_total = scaler_->overflows();
  if (bad_grads) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "note: step %lld skipped: fp16 gradients overflowed at loss scale %g; scale "
                  "halved to %g (not counted toward train.max_bad_steps)",
                  (long long)(step_ + 1), step_scale_, scaler_->scale());
    print(line);
  }
  return bad_grads;
}

std::string Trainer::precision_state() const {
  return scaler_ ? scaler_->to_json() : "null";
}

void Trainer::restore_precision_state(const std::string& json) {
  if (scaler_ && json != "null") scaler_->from_json(json);
}

}  // namespace tessel::train
