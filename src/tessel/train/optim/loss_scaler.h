// SPDX-License-Identifier: Apache-2.0
// Dynamic loss scaling for fp16 training (Micikevicius et al. 2018, "Mixed Precision Training"):
// the loss is multiplied by a scale before backward so that small gradients survive f16's narrow
// exponent range, and the gradients are divided by it again before the optimizer. An overflow
// (a non-finite gradient) skips the step and halves the scale; `window` overflow-free steps in a
// row double it, probing for the largest scale that does not overflow.
#pragma once

#include <cstdint>
#include <string>

namespace tessel::train {

class LossScaler {
 public:
  // init in (0, 2^32]; window >= 1.
  LossScaler(double init, int64_t window);

  double scale() const { return scale_; }
  int64_t overflows() const { return overflows_; }
  int64_t clean_steps() const { return clean_; }  // overflow-free steps since the last change

  // Records one step: an overflow halves the scale, `window` clean steps in a row double it.
  void update(bool overflow);

  // {"scale": s, "clean_steps": n, "overflows": n} for the checkpoint's state.json.
  std::string to_json() const;
  void from_json(const std::string& json);  // Error on a malformed or out-of-range value

  static constexpr double kMinScale = 1.0 / 16777216.0;  // 2^-24
  static constexpr double kMaxScale = 4294967296.0;      // 2^32

 private:
  double scale_;
  int64_t window_;
  int64_t clean_ = 0;
  int64_t overflows_ = 0;
};

}  // namespace tessel::train
