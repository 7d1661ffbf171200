// SPDX-License-Identifier: Apache-2.0
// Learning-rate schedule: linear warmup to the peak, then cosine (Loshchilov & Hutter, "SGDR",
// 2017), linear or constant decay to peak * min_ratio at the last step. A pure function of the
// step, so a resumed run needs only the step number to continue the schedule exactly.
#pragma once

#include <cstdint>
#include <string>

namespace tessel::train {

enum class Decay { Cosine, Linear, Constant };
Decay parse_decay(const std::string& name);  // "cosine" | "linear" | "constant", else Error
const char* decay_name(Decay decay);

struct LrSchedule {
  double peak = 1e-3;
  double min_ratio = 0.1;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  Decay decay = Decay::Cosine;

  // The learning rate of optimizer step `step` (1-based: the first update is step 1).
  // Warmup: peak * step / warmup_steps for step <= warmup_steps. Then the decay runs from peak at
  // step warmup_steps to peak * min_ratio at step total_steps; steps beyond stay at the minimum.
  double at(int64_t step) const;
};

}  // namespace tessel::train
