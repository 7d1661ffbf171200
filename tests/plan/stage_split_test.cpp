// SPDX-License-Identifier: Apache-2.0
// Alpa's inter-operator DP (plan/stage_split.h) against enumerating every contiguous split, on
// odd layer counts and uneven costs: the least pipeline time, with and without a memory bound
// that the time-optimal split breaks; the least memory when nothing fits; the in-flight counts
// of the schedules.
#include "tessel/plan/stage_split.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "tessel/core/error.h"

namespace tessel::plan {
namespace {

std::vector<LayerCost> odd_layers(int n) {
  std::vector<LayerCost> layers;
  for (int i = 0; i < n; ++i) {
    // Uneven: a heavy first layer (an embedding with a large state), a heavier last (the head).
    LayerCost c;
    c.seconds = 1.0 + double((i * 7) % 5) * 0.37 + (i == n - 1 ? 2.3 : 0.0);
    c.state_bytes = i == 0 ? 50.0 : 10.0 + double((i * 3) % 4);
    c.activation_bytes = 3.0 + double((i * 5) % 3);
    layers.push_back(c);
  }
  return layers;
}

// Every split of `n` layers into `stages` non-empty contiguous stages.
void each_split(int n, int stages, const std::function<void(const std::vector<int>&)>& f) {
  std::vector<int> first{0};
  std::function<void()> rec = [&] {
    const int s = int(first.size()) - 1;
    if (s == stages - 1) {
      first.push_back(n);
      f(first);
      first.pop_back();
      return;
    }
    for (int e = first.back() + 1; e <= n - (stages - 1 - s); ++e) {
      first.push_back(e);
      rec();
      first.pop_back();
    }
  };
  rec();
}

StageSplit brute_force(const std::vector<LayerCost>& layers, const StageSplitRequest& r) {
  StageSplit best;
  double least = std::numeric_limits<double>::infinity();
  each_split(int(layers.size()), r.stages, [&](const std::vector<int>& first) {
    StageSplit s = evaluate_split(layers, r, first);
    if (s.feasible && s.pipeline_seconds < least - 1e-12) {
      least = s.pipeline_seconds;
      best = s;
    }
  });
  return best;
}

TEST(StageSplit, MatchesEnumerationOnOddSizes) {
  for (int n : {7, 13}) {
    for (int stages : {1, 2, 3, 5}) {
      for (int64_t micro : {1, 3, 7}) {
        const auto layers = odd_layers(n);
        StageSplitRequest r;
        r.stages = stages;
        r.micro_batches = micro;
        const StageSplit dp = split_stages(layers, r);
        const StageSplit want = brute_force(layers, r);
        ASSERT_TRUE(dp.feasible);
        EXPECT_NEAR(dp.pipeline_seconds, want.pipeline_seconds, 1e-9)
            << n << " layers, " << stages << " stages, " << micro << " micro-batches";
        ASSERT_EQ(dp.first_layer.size(), size_t(stages) + 1);
        // The reported figures are the split's own.
        const StageSplit again = evaluate_split(layers, r, dp.first_layer);
        EXPECT_DOUBLE_EQ(again.pipeline_seconds, dp.pipeline_seconds);
      }
    }
  }
}

TEST(StageSplit, MemoryBoundMovesTheSplit) {
  const auto layers = odd_layers(13);
  StageSplitRequest r;
  r.stages = 3;
  r.micro_batches = 7;
  r.in_flight = in_flight_micro_batches("1f1b", 3, 7);
  const StageSplit free = split_stages(layers, r);
  ASSERT_TRUE(free.feasible);
  // A bound just under the time-optimal split's fullest stage: that split no longer fits.
  double fullest = 0;
  for (double b : free.stage_bytes) fullest = std::max(fullest, b);
  r.memory_bytes = fullest - 1;
  const StageSplit bound = split_stages(layers, r);
  const StageSplit want = brute_force(layers, r);
  ASSERT_TRUE(want.feasible);
  ASSERT_TRUE(bound.feasible);
  EXPECT_NEAR(bound.pipeline_seconds, want.pipeline_seconds, 1e-9);
  EXPECT_NE(bound.first_layer, free.first_layer);
  for (double b : bound.stage_bytes) EXPECT_LE(b, r.memory_bytes);
  EXPECT_GE(bound.pipeline_seconds, free.pipeline_seconds);
}

TEST(StageSplit, NothingFitsNamesTheLeastMemory) {
  const auto layers = odd_layers(7);
  StageSplitRequest r;
  r.stages = 3;
  r.micro_batches = 3;
  r.in_flight = in_flight_micro_batches("gpipe", 3, 3);
  // The least, over every split, of its fullest stage.
  double least = std::numeric_limits<double>::infinity();
  each_split(7, 3, [&](const std::vector<int>& first) {
    const StageSplit s = evaluate_split(layers, r, first);
    double fullest = 0;
    for (double b : s.stage_bytes) fullest = std::max(fullest, b);
    least = std::min(least, fullest);
  });
  r.memory_bytes = least - 0.5;
  const StageSplit none = split_stages(layers, r);
  EXPECT_FALSE(none.feasible);
  EXPECT_DOUBLE_EQ(none.least_stage_bytes, least);
  r.memory_bytes = least;
  EXPECT_TRUE(split_stages(layers, r).feasible);
}

TEST(StageSplit, InFlightBySchedule) {
  EXPECT_EQ(in_flight_micro_batches("1f1b", 3, 7), (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(in_flight_micro_batches("1f1b", 5, 2), (std::vector<int64_t>{2, 2, 2, 2, 1}));
  EXPECT_EQ(in_flight_micro_batches("gpipe", 3, 7), (std::vector<int64_t>{7, 7, 7}));
  EXPECT_THROW(in_flight_micro_batches("zigzag", 3, 7), Error);
  StageSplitRequest r;
  r.stages = 8;
  EXPECT_THROW(split_stages(odd_layers(7), r), Error);  // fewer layers than stages
}

}  // namespace
}  // namespace tessel::plan
