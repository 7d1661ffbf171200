// SPDX-License-Identifier: Apache-2.0
// The mixed-precision axis's hooks: the 16-bit copies per micro-batch, the scaled loss, and the
// fp16 overflow check agreed over every axis.
#include "tessel/train/strategy/precision_strategy.h"

#include <cmath>
#include <cstdio>

#include "tessel/nn/autocast.h"
#include "tessel/ops/elementwise.h"

namespace tessel::train {

DType compute_dtype_of(const std::string& precision) {
  if (precision == "bf16") return DType::BF16;
  if (precision == "fp16") return DType::F16;
  TESSEL_CHECK(precision == "fp32", "train.precision = '", precision,
               "', expected fp32, bf16 or fp16");
  return DType::F32;
}

PrecisionStrategy::PrecisionStrategy(PrecisionSetup setup)
    : setup_(std::move(setup)), dtype_(compute_dtype_of(setup_.precision)) {
  TESSEL_CHECK(dtype_ != DType::F32, "PrecisionStrategy: fp32 needs no precision axis");
  if (dtype_ == DType::F16)
    scaler_ = std::make_unique<LossScaler>(setup_.loss_scale_init, setup_.loss_scale_window);
}

std::string PrecisionStrategy::name() const {
  return std::string(dtype_ == DType::BF16 ? "bf16" : "fp16 with dynamic loss scaling") +
         " mixed precision";
}

void PrecisionStrategy::begin_step() {
  step_scale_ = scaler_ ? scaler_->scale() : 1.0;
}

std::shared_ptr<void> PrecisionStrategy::micro_batch_scope() {
  const std::vector<parallel::Zero3Parameters*> zs = setup_.zero3;
  if (kept_) {  // memory offload: the copies in chunks, taken unit by unit
    const nn::LowPrecisionScope::Kept kept = kept_;
    auto* scope = new nn::LowPrecisionScope(
        setup_.modules, dtype_, [kept](const Tensor& p) { return kept(p).defined(); }, kept);
    set_scope_(scope);
    return std::shared_ptr<void>(scope, [set = set_scope_](void* p) {
      set(nullptr);
      delete static_cast<nn::LowPrecisionScope*>(p);
    });
  }
  if (zs.empty()) return std::make_shared<nn::LowPrecisionScope>(setup_.modules, dtype_);
  // ZeRO-3: its parameters hold values only while gathered, so their copies wait for the gather.
  auto* scope = new nn::LowPrecisionScope(setup_.modules, dtype_, [zs](const Tensor& p) {
    for (parallel::Zero3Parameters* z : zs)
      if (z->holds(p)) return true;
    return false;
  });
  for (parallel::Zero3Parameters* z : zs) z->set_low_precision(scope);
  return std::shared_ptr<void>(scope, [zs](void* p) {
    for (parallel::Zero3Parameters* z : zs) z->set_low_precision(nullptr);
    delete static_cast<nn::LowPrecisionScope*>(p);
  });
}

Tensor PrecisionStrategy::loss_for_backward(const Tensor& loss) {
  return scaler_ ? ops::mul(loss, step_scale_) : loss;
}

bool PrecisionStrategy::skip_update(StepRecord& r, bool local_nonfinite) {
  if (!scaler_) return false;
  r.loss_scale = step_scale_;
  r.grad_norm /= step_scale_;
  // The global norm carries most overflows to every rank already, but not all: a tp rank other
  // than 0 leaves its replicated parameters out of the norm. The flag, agreed over every axis,
  // makes one rank's non-finite gradient skip the step on all of them. Under --ep the ep and
  // expert-dp groups lie inside dp, so dp's max covers them: the norm is summed over one ep group
  // only (without ZeRO), and an inf in one rank's experts reaches the other groups by the flag.
  bool bad_grads = !std::isfinite(r.grad_norm) || local_nonfinite;
  const TrainLayout& l = setup_.layout;
  if (l.dp || l.tp || l.pp) {
    Tensor flag = full({1}, bad_grads ? 1.0 : 0.0, DType::I32);
    for (const dist::CommPtr& axis : {l.dp, l.tp, l.pp})
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
  if (bad_grads && setup_.print) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "note: step %lld skipped: fp16 gradients overflowed at loss scale %g; scale "
                  "halved to %g (not counted toward train.max_bad_steps)",
                  (long long)r.step, step_scale_, scaler_->scale());
    setup_.print(line);
  }
  return bad_grads;
}

std::string PrecisionStrategy::state_json() const {
  return scaler_ ? scaler_->to_json() : "null";
}

void PrecisionStrategy::restore_state(const std::string& json) {
  if (scaler_ && json != "null") scaler_->from_json(json);
}

}  // namespace tessel::train
