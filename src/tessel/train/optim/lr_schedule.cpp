// SPDX-License-Identifier: Apache-2.0
// Learning-rate schedule: linear warmup, then cosine (Loshchilov & Hutter, "SGDR", 2017), linear or
// constant decay. Stateless, so resuming needs only the step number.
#include "tessel/train/optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "tessel/core/error.h"

namespace tessel::train {

Decay parse_decay(const std::string& name) {
  if (name == "cosine") return Decay::Cosine;
  if (name == "linear") return Decay::Linear;
  if (name == "constant") return Decay::Constant;
  TESSEL_FAIL("unknown lr decay '", name, "', expected one of: cosine, linear, constant");
}

const char* decay_name(Decay decay) {
  switch (decay) {
    case Decay::Cosine:
      return "cosine";
    case Decay::Linear:
      return "linear";
    case Decay::Constant:
      return "constant";
  }
  return "?";
}

double LrSchedule::at(int64_t step) const {
  // Checked on every call (a few compares): a schedule is plain data a config fills in, and a
  // wrong field should name itself rather than produce a silently odd curve.
  TESSEL_CHECK(std::isfinite(peak) && peak >= 0, "lr schedule: peak must be finite and >= 0, got ",
               peak);
  TESSEL_CHECK(min_ratio >= 0 && min_ratio <= 1, "lr schedule: min_ratio must lie in [0, 1], got ",
               min_ratio);
  TESSEL_CHECK(total_steps >= 1, "lr schedule: total_steps must be >= 1, got ", total_steps);
  TESSEL_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps,
               "lr schedule: warmup_steps must lie in [0, total_steps = ", total_steps, "], got ",
               warmup_steps);
  TESSEL_CHECK(step >= 1, "lr schedule: step is 1-based, got ", step);

  if (step <= warmup_steps) return peak * double(step) / double(warmup_steps);
  if (decay == Decay::Constant) return peak;
  const double min_lr = peak * min_ratio;
  if (step >= total_steps) return min_lr;
  // Here warmup_steps < step < total_steps, so the span is positive.
  const double progress = double(step - warmup_steps) / double(total_steps - warmup_steps);
  if (decay == Decay::Linear) return peak + (min_lr - peak) * progress;
  return min_lr + (peak - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace tessel::train
