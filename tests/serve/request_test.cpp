// SPDX-License-Identifier: Apache-2.0
// The engine contract's parameter checks: every out-of-range field is refused by name.
#include "tessel/serve/request.h"

#include <gtest/gtest.h>

#include "tessel/core/error.h"

namespace tessel::serve {
namespace {

void expect_refused(SamplingParams p, const std::string& name) {
  try {
    p.validate();
    FAIL() << name << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(SamplingParams, DefaultsAreValid) {
  SamplingParams().validate();
}

TEST(SamplingParams, EachRangeIsChecked) {
  SamplingParams p;
  p.temperature = -0.5;
  expect_refused(p, "temperature");
  p = {};
  p.top_p = 0;
  expect_refused(p, "top_p");
  p = {};
  p.top_k = -3;
  expect_refused(p, "top_k");
  p = {};
  p.min_p = 1.5;
  expect_refused(p, "min_p");
  p = {};
  p.repetition_penalty = 0;
  expect_refused(p, "repetition_penalty");
  p = {};
  p.presence_penalty = 2.5;
  expect_refused(p, "presence_penalty");
  p = {};
  p.frequency_penalty = -7;
  expect_refused(p, "frequency_penalty");
  p = {};
  p.max_tokens = 0;
  expect_refused(p, "max_tokens");
  p = {};
  p.n = 0;
  expect_refused(p, "n ");
  p = {};
  p.stop = {"ok", ""};
  expect_refused(p, "empty stop");
  p = {};
  p.logprobs = 21;
  expect_refused(p, "logprobs");
  p = {};
}

TEST(SamplingParams, GreedyMeansTemperatureZeroOrTopOne) {
  SamplingParams p;
  EXPECT_FALSE(p.greedy());
  p.temperature = 0;
  EXPECT_TRUE(p.greedy());
  p = {};
  p.top_k = 1;
  EXPECT_TRUE(p.greedy());
  EXPECT_EQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_EQ(finish_reason_name(FinishReason::kStop), "stop");
}

}  // namespace
}  // namespace tessel::serve
