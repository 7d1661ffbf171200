// SPDX-License-Identifier: Apache-2.0
// Mixed-precision training (Micikevicius et al. 2018): f32 master weights and f32 AdamW state;
// each micro-batch runs its forward on 16-bit casts of the weights (nn::LowPrecisionScope), keeps
// its activations in 16 bits and computes the loss in f32 (the cross-entropy's statistics are
// f32). fp16 adds dynamic loss scaling (LossScaler): backward starts from loss * scale, the
// gradients are unscaled in the trainer's one scaling pass, and an overflow skips the step on
// every rank and halves the scale. Overflow skips are not "bad steps": they never count toward
// train.max_bad_steps.
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
  // The pipeline and tensor-parallel steps build their own forward, and ZeRO-3 gathers parameters
  // module by module after the weight copies would be made: none of them reads the copies yet.
  const bool zero3 = config_.parallel.zero_stage == 3 && dp_size() > 1;
  TESSEL_CHECK(
      compute_dtype_ == DType::F32 || (layout_.tp_size() == 1 && layout_.pp_size() == 1 && !zero3),
      "train.precision = ", t.precision,
      " runs on one process, with data parallelism and "
      "with ZeRO stages 1-2; not yet with ",
      layout_.str(), ", parallel.zero_stage = ", config_.parallel.zero_stage,
      " (use train.precision = fp32 there)");
}

std::unique_ptr<nn::LowPrecisionScope> Trainer::precision_scope() {
  if (compute_dtype_ == DType::F32) return nullptr;
  return std::make_unique<nn::LowPrecisionScope>(*model_, compute_dtype_);
}

Tensor Trainer::loss_for_backward(const Tensor& loss) {
  step_scale_ = scaler_ ? scaler_->scale() : 1.0;
  return scaler_ ? ops::mul(loss, step_scale_) : loss;
}

bool Trainer::overflow_check(StepRecord& r) {
  if (!scaler_) return false;
  r.loss_scale = step_scale_;
  r.grad_norm /= step_scale_;
  // The gradients were averaged over dp, so a rank's overflow shows on every rank already; the
  // flag makes the agreement explicit for layouts where a rank sees only its shard.
  bool bad_grads = !std::isfinite(r.grad_norm);
  if (dp_) {
    Tensor flag = full({1}, bad_grads ? 1.0 : 0.0, DType::I32);
    dp_->all_reduce(flag, dist::ReduceOp::Max);
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
