// SPDX-License-Identifier: Apache-2.0
// The learning-rate schedule at the points where its value is known exactly: warmup, its end,
// the cosine midpoint, the last step and beyond, for each decay shape, and its errors.
#include "tessel/train/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "tessel/core/error.h"

namespace tessel::train {
namespace {

LrSchedule schedule(Decay decay, int64_t warmup = 7, int64_t total = 33) {
  LrSchedule s;
  s.peak = 6e-4;
  s.min_ratio = 0.1;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.decay = decay;
  return s;
}

TEST(LrSchedule, CosineWithWarmup) {
  const LrSchedule s = schedule(Decay::Cosine);
  const double peak = 6e-4, min = 6e-4 * 0.1;
  EXPECT_DOUBLE_EQ(s.at(1), peak / 7);
  EXPECT_DOUBLE_EQ(s.at(3), peak * 3 / 7);
  EXPECT_DOUBLE_EQ(s.at(7), peak);  // end of warmup
  // Midpoint of the decay: step 7 + (33 - 7) / 2 = 20, where cos = 0.
  EXPECT_DOUBLE_EQ(s.at(20), (peak + min) / 2);
  EXPECT_GT(s.at(8), s.at(20));
  EXPECT_LT(s.at(8), peak);
  EXPECT_DOUBLE_EQ(s.at(33), min);  // last step
  EXPECT_DOUBLE_EQ(s.at(34), min);  // beyond stays at the minimum
  EXPECT_DOUBLE_EQ(s.at(1000), min);
  // Monotone after warmup.
  for (int64_t step = 8; step <= 40; ++step) EXPECT_LE(s.at(step), s.at(step - 1)) << step;
}

TEST(LrSchedule, Linear) {
  const LrSchedule s = schedule(Decay::Linear);
  const double peak = 6e-4, min = 6e-4 * 0.1;
  EXPECT_DOUBLE_EQ(s.at(1), peak / 7);
  EXPECT_DOUBLE_EQ(s.at(7), peak);
  EXPECT_DOUBLE_EQ(s.at(20), (peak + min) / 2);
  EXPECT_DOUBLE_EQ(s.at(7 + 13), peak + (min - peak) * 13.0 / 26.0);
  EXPECT_DOUBLE_EQ(s.at(27), peak + (min - peak) * 20.0 / 26.0);
  EXPECT_DOUBLE_EQ(s.at(33), min);
  EXPECT_DOUBLE_EQ(s.at(50), min);
}

TEST(LrSchedule, ConstantStaysAtPeakAfterWarmup) {
  const LrSchedule s = schedule(Decay::Constant);
  EXPECT_DOUBLE_EQ(s.at(2), 6e-4 * 2 / 7);
  for (int64_t step : {7, 8, 20, 33, 100}) EXPECT_EQ(s.at(step), 6e-4) << step;
}

TEST(LrSchedule, NoWarmupStartsAtPeak) {
  const LrSchedule cos = schedule(Decay::Cosine, 0, 13);
  // The decay runs from peak at step 0, so step 1 is one step into it (as a warmup of 0 means).
  EXPECT_DOUBLE_EQ(cos.at(1), 6e-5 + (6e-4 - 6e-5) * 0.5 * (1 + std::cos(std::numbers::pi / 13)));
  EXPECT_DOUBLE_EQ(cos.at(13), 6e-5);
  const LrSchedule lin = schedule(Decay::Linear, 0, 10);
  EXPECT_DOUBLE_EQ(lin.at(1), 6e-4 + (6e-5 - 6e-4) * 0.1);
  EXPECT_DOUBLE_EQ(lin.at(5), (6e-4 + 6e-5) / 2);
  EXPECT_EQ(schedule(Decay::Constant, 0, 10).at(1), 6e-4);
  // Warmup as long as the run: the last step is the peak, and beyond it the minimum.
  const LrSchedule all_warmup = schedule(Decay::Cosine, 5, 5);
  EXPECT_DOUBLE_EQ(all_warmup.at(5), 6e-4);
  EXPECT_DOUBLE_EQ(all_warmup.at(6), 6e-5);
}

TEST(LrSchedule, DecayNames) {
  for (Decay d : {Decay::Cosine, Decay::Linear, Decay::Constant})
    EXPECT_EQ(parse_decay(decay_name(d)), d);
  for (const char* bad : {"", "Cosine", "exp", "cosine "}) {
    try {
      parse_decay(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'" + std::string(bad) + "'"), std::string::npos) << msg;
      for (const char* allowed : {"cosine", "linear", "constant"})
        EXPECT_NE(msg.find(allowed), std::string::npos) << msg;
    }
  }
}

TEST(LrSchedule, BadFieldsAreErrors) {
  auto error_of = [](const LrSchedule& s, int64_t step) -> std::string {
    try {
      s.at(step);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(error_of(schedule(Decay::Cosine), 0).find("1-based"), std::string::npos);
  EXPECT_NE(error_of(schedule(Decay::Cosine, 40, 33), 1).find("warmup_steps"), std::string::npos);
  EXPECT_NE(error_of(schedule(Decay::Cosine, 0, 0), 1).find("total_steps"), std::string::npos);
  LrSchedule s = schedule(Decay::Cosine);
  s.min_ratio = 1.5;
  EXPECT_NE(error_of(s, 1).find("min_ratio"), std::string::npos);
}

}  // namespace
}  // namespace tessel::train
