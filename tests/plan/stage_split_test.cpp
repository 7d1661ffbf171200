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

// The best over every split (of stages * chunks_per_rank chunks under interleaving).
StageSplit brute_force(const std::vector<LayerCost>& layers, const StageSplitRequest& r) {
  StageSplit best;
  double least = std::numeric_limits<double>::infinity();
  each_split(int(layers.size()), r.stages * r.chunks_per_rank, [&](const std::vector<int>& first) {
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

TEST(StageSplit, InterleavedStepOfEqualChunksIsNarayanans) {
  // S = 3 ranks, V = 2 chunks each, B = 6 micro-batches, every chunk one layer of time t:
  // (B * V + S - 1) * t.
  std::vector<LayerCost> layers(6, LayerCost{0.5, 1, 1});
  StageSplitRequest r;
  r.stages = 3;
  r.chunks_per_rank = 2;
  r.micro_batches = 6;
  const StageSplit s = evaluate_split(layers, r, {0, 1, 2, 3, 4, 5, 6});
  EXPECT_DOUBLE_EQ(s.pipeline_seconds, (6 * 2 + 3 - 1) * 0.5);
  EXPECT_EQ(s.rank_seconds, (std::vector<double>{1.0, 1.0, 1.0}));
  // Chunk c lives on rank c % S: rank 0 holds chunks 0 and 3.
  layers[3].seconds = 2.5;
  const StageSplit heavy = evaluate_split(layers, r, {0, 1, 2, 3, 4, 5, 6});
  EXPECT_EQ(heavy.rank_seconds, (std::vector<double>{3.0, 1.0, 1.0}));
  EXPECT_DOUBLE_EQ(heavy.pipeline_seconds, 6 * 3.0);
}

TEST(StageSplit, InterleavedSplitEqualsEnumerationOnOddSizes) {
  for (int n : {7, 13}) {
    for (int stages : {2, 3}) {
      for (int v : {2, 3}) {
        if (stages * v > n || (n == 13 && stages * v > 4)) continue;  // enumeration's size
        for (int64_t micro : {int64_t(stages), int64_t(2 * stages)}) {
          const auto layers = odd_layers(n);
          StageSplitRequest r;
          r.stages = stages;
          r.chunks_per_rank = v;
          r.micro_batches = micro;
          const StageSplit exact = split_stages(layers, r);
          const StageSplit want = brute_force(layers, r);
          const std::string what = std::to_string(n) + " layers, " + std::to_string(stages) +
                                   " ranks x " + std::to_string(v) + " chunks, " +
                                   std::to_string(micro) + " micro-batches";
          ASSERT_TRUE(exact.feasible);
          EXPECT_NEAR(exact.pipeline_seconds, want.pipeline_seconds, 1e-9) << what;
          // The descent (what large splits get): a local optimum of these lumpy layers, within
          // a few percent of the least.
          r.enumerate_up_to = 0;
          const StageSplit got = split_stages(layers, r);
          ASSERT_TRUE(got.feasible);
          ASSERT_EQ(got.first_layer.size(), size_t(stages * v) + 1);
          EXPECT_GE(got.pipeline_seconds, want.pipeline_seconds - 1e-9) << what;
          EXPECT_LE(got.pipeline_seconds, want.pipeline_seconds * 1.05) << what;
          const StageSplit again = evaluate_split(layers, r, got.first_layer);
          EXPECT_DOUBLE_EQ(again.pipeline_seconds, got.pipeline_seconds) << what;
          EXPECT_EQ(again.rank_seconds, got.rank_seconds) << what;
          // At least as fast as the least-bottleneck split it starts from.
          StageSplitRequest flat;
          flat.stages = stages * v;
          flat.micro_batches = micro * v;
          const StageSplit start =
              evaluate_split(layers, r, split_stages(layers, flat).first_layer);
          EXPECT_LE(got.pipeline_seconds, start.pipeline_seconds + 1e-12) << what;
        }
      }
    }
  }
}

TEST(StageSplit, InterleavedSplitLightensTheHeadsRank) {
  // Uniform blocks between a light embedding and a head of four blocks' time, 2 ranks x 2
  // chunks over 8 micro-batches: the least bottleneck alone would load rank 1 (the head's chunk
  // plus a full chunk of blocks); the descent moves blocks to rank 0.
  std::vector<LayerCost> layers{{0.1, 1, 1}};
  for (int i = 0; i < 13; ++i) layers.push_back({1.0, 1, 1});
  layers.push_back({4.0, 1, 1});
  StageSplitRequest r;
  r.stages = 2;
  r.chunks_per_rank = 2;
  r.micro_batches = 8;
  r.enumerate_up_to = 0;  // the descent
  const StageSplit got = split_stages(layers, r);
  const StageSplit want = brute_force(layers, r);
  EXPECT_NEAR(got.pipeline_seconds, want.pipeline_seconds, 1e-9);
  EXPECT_LT(std::abs(got.rank_seconds[0] - got.rank_seconds[1]), 1.0 + 1e-9);
  StageSplitRequest flat;
  flat.stages = 4;
  flat.micro_batches = 16;
  const StageSplit start = evaluate_split(layers, r, split_stages(layers, flat).first_layer);
  EXPECT_LT(got.pipeline_seconds, start.pipeline_seconds);
}

TEST(StageSplit, InterleavedMemoryBoundAndErrors) {
  const auto layers = odd_layers(13);
  StageSplitRequest r;
  r.stages = 2;
  r.chunks_per_rank = 2;
  r.micro_batches = 4;
  r.in_flight = in_flight_micro_batches("interleaved:2", 2, 4);
  const StageSplit free = split_stages(layers, r);
  ASSERT_TRUE(free.feasible);
  ASSERT_EQ(free.rank_bytes.size(), 2u);
  // Rank 0 keeps two micro-batches in flight, rank 1 one: a rank's bytes are its chunks' state
  // plus that count times their activations.
  double rank0 = 0;
  for (int c : {0, 2}) rank0 += free.stage_bytes[size_t(c)];
  EXPECT_DOUBLE_EQ(free.rank_bytes[0], rank0);
  // Just under the free split's fullest rank, and enough for the best split that fits.
  const double fullest = std::max(free.rank_bytes[0], free.rank_bytes[1]);
  r.memory_bytes = fullest - 1;
  const StageSplit want = brute_force(layers, r);
  ASSERT_TRUE(want.feasible);
  const StageSplit bound = split_stages(layers, r);
  ASSERT_TRUE(bound.feasible);
  for (double b : bound.rank_bytes) EXPECT_LE(b, r.memory_bytes);
  EXPECT_NEAR(bound.pipeline_seconds, want.pipeline_seconds, 1e-9);
  r.enumerate_up_to = 0;  // the descent, from the least bottleneck
  const StageSplit descended = split_stages(layers, r);
  ASSERT_TRUE(descended.feasible);
  for (double b : descended.rank_bytes) EXPECT_LE(b, r.memory_bytes);
  r.enumerate_up_to = 200000;
  // Nothing fits: no split, and the bytes its fullest rank would need.
  r.memory_bytes = 1;
  const StageSplit none = split_stages(layers, r);
  EXPECT_FALSE(none.feasible);
  EXPECT_GT(none.least_stage_bytes, 1.0);
  r.memory_bytes = 0;
  r.chunks_per_rank = 7;  // 14 chunks of 13 layers
  EXPECT_THROW(split_stages(layers, r), Error);
  r.chunks_per_rank = 0;
  EXPECT_THROW(split_stages(layers, r), Error);
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
