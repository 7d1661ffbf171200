// SPDX-License-Identifier: Apache-2.0
// LossScaler: the scale stays a power of two times the initial value, so scaling and unscaling
// are exact in binary floating point (no rounding is added to the gradients by the scaling).
#include "tessel/train/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"

namespace tessel::train {

LossScaler::LossScaler(double init, int64_t window) : scale_(init), window_(window) {
  TESSEL_CHECK(std::isfinite(init) && init > 0 && init <= kMaxScale, "loss scale: initial scale ",
               init, " must be in (0, 2^32]");
  TESSEL_CHECK(window >= 1, "loss scale: window ", window, " must be >= 1");
}

void LossScaler::update(bool overflow) {
  if (overflow) {
    ++overflows_;
    clean_ = 0;
    scale_ = std::max(scale_ * 0.5, kMinScale);
    return;
  }
  if (++clean_ >= window_) {
    clean_ = 0;
    scale_ = std::min(scale_ * 2.0, kMaxScale);
  }
}

std::string LossScaler::to_json() const {
  return nlohmann::json{{"scale", scale_}, {"clean_steps", clean_}, {"overflows", overflows_}}
      .dump();
}

void LossScaler::from_json(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  TESSEL_CHECK(!j.is_discarded() && j.is_object() && j.contains("scale") &&
                   j["scale"].is_number() && j.contains("clean_steps") &&
                   j["clean_steps"].is_number_integer() && j.contains("overflows") &&
                   j["overflows"].is_number_integer(),
               "loss scale state ", json,
               ": expected {\"scale\": number, \"clean_steps\": int, \"overflows\": int}");
  const double scale = j["scale"].get<double>();
  TESSEL_CHECK(std::isfinite(scale) && scale >= kMinScale && scale <= kMaxScale,
               "loss scale state: scale ", scale, " is outside [2^-24, 2^32]");
  const int64_t clean = j["clean_steps"].get<int64_t>(), overflows = j["overflows"].get<int64_t>();
  TESSEL_CHECK(clean >= 0 && overflows >= 0, "loss scale state: clean_steps ", clean,
               " and overflows ", overflows, " must be >= 0");
  scale_ = scale;
  clean_ = clean;
  overflows_ = overflows;
}

}  // namespace tessel::train
