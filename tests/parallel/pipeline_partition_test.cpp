// SPDX-License-Identifier: Apache-2.0
// Stage partitioning: balance() reaches the same maximum stage cost as a brute-force search over
// all contiguous partitions, places the embedding first and the head last, moves blocks off a
// stage with a heavy LM head, and the "3,4,4,2" block-count syntax round-trips and rejects bad
// specs with messages that name the problem.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "common/error_text.h"
#include "tessel/core/error.h"
#include "tessel/parallel/pipeline/partition.h"

namespace tessel::parallel::pipeline {
namespace {

// "embedding", h.0..h.{blocks-1}, "head" with the given costs.
std::vector<LayerCost> gpt_like(int blocks, double block, double embedding, double head) {
  std::vector<LayerCost> out{{"embedding", embedding}};
  for (int i = 0; i < blocks; ++i) out.push_back({"h." + std::to_string(i), block});
  out.push_back({"head", head});
  return out;
}

// The smallest max stage cost over every split of costs into `stages` non-empty ranges.
double brute_force(const std::vector<LayerCost>& costs, int64_t stages) {
  const int64_t n = static_cast<int64_t>(costs.size());
  double best = std::numeric_limits<double>::infinity();
  StagePartition p;
  p.layers = n;
  std::function<void(int64_t)> rec = [&](int64_t next) {
    if (p.num_stages() == stages) {
      best = std::min(best, max_stage_cost(p, costs));
      return;
    }
    const int64_t left = stages - p.num_stages();
    for (int64_t b = next; b <= n - left; ++b) {
      p.first.push_back(b);
      rec(b + 1);
      p.first.pop_back();
    }
  };
  p.first.push_back(0);
  rec(1);
  return best;
}

using tessel::test::error_of;

TEST(PipelinePartition, BalanceMatchesBruteForce) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> real(0.0, 5.0);
  std::uniform_int_distribution<int> integer(0, 9);
  for (int n : {7, 13}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<LayerCost> costs;
      for (int i = 0; i < n; ++i) {
        // Integer costs make sums exact and ties common; real costs exercise rounding.
        costs.push_back({"l" + std::to_string(i), trial % 2 ? real(rng) : integer(rng)});
      }
      for (int64_t stages = 1; stages <= 5; ++stages) {
        const StagePartition p = balance(costs, stages);
        ASSERT_EQ(p.num_stages(), stages);
        EXPECT_EQ(p.layers, n);
        EXPECT_EQ(p.stage_of(0), 0);
        EXPECT_EQ(p.stage_of(n - 1), stages - 1);
        for (int64_t size : p.sizes()) EXPECT_GE(size, 1);
        const double want = brute_force(costs, stages);
        if (trial % 2) {
          EXPECT_NEAR(max_stage_cost(p, costs), want, 1e-9 * (1.0 + want)) << n << " " << stages;
        } else {
          EXPECT_EQ(max_stage_cost(p, costs), want) << n << " " << stages;
        }
      }
    }
  }
}

TEST(PipelinePartition, UniformBlocksSplitEvenlyWithEmbeddingFirstAndHeadLast) {
  const auto costs = gpt_like(12, 1.0, 0.0, 0.0);
  const StagePartition p = balance(costs, 4);
  EXPECT_EQ(to_spec(p, layer_names(costs)), "3,3,3,3");
  EXPECT_EQ(p.sizes(), (std::vector<int64_t>{4, 3, 3, 4}));
  EXPECT_EQ(p.stage_of(0), 0);   // embedding
  EXPECT_EQ(p.stage_of(13), 3);  // head
  EXPECT_EQ(p.layers_of(1), (std::pair<int64_t, int64_t>{4, 7}));
  EXPECT_DOUBLE_EQ(max_stage_cost(p, costs), 3.0);
  EXPECT_DOUBLE_EQ(imbalance(p, costs), 1.0);
}

TEST(PipelinePartition, TiesGoToEarlierStages) {
  // 13 uniform layers over 5 stages: optimum 3, and the earliest stages take 3 each.
  std::vector<LayerCost> costs;
  for (int i = 0; i < 13; ++i) costs.push_back({"l" + std::to_string(i), 1.0});
  EXPECT_EQ(balance(costs, 5).sizes(), (std::vector<int64_t>{3, 3, 3, 3, 1}));
}

TEST(PipelinePartition, HeavyHeadMovesBlocksOffTheLastStage) {
  // GPT-2 small's tied LM head is 50257*C flops per token against 12*C*C for a block: about
  // 5.5 blocks at C = 768; 2.5 stands for a wider model.
  const auto costs = gpt_like(12, 1.0, 0.0, 2.5);
  const StagePartition p = balance(costs, 4);
  // Optimum 4: the earliest stages take four blocks each, which leaves the head alone on the
  // last stage (a split that block counts cannot express, since every count must be positive).
  EXPECT_EQ(p.sizes(), (std::vector<int64_t>{5, 4, 4, 1}));
  EXPECT_EQ(p.stage_of(13), 3);
  EXPECT_DOUBLE_EQ(max_stage_cost(p, costs), 4.0);
  EXPECT_LT(max_stage_cost(p, costs),
            max_stage_cost(explicit_partition("3,3,3,3", layer_names(costs)), costs));
  EXPECT_NEAR(imbalance(p, costs), 4.0 / (14.5 / 4.0), 1e-12);
}

TEST(PipelinePartition, VirtualStagesRoundRobinOverRanks) {
  const auto costs = gpt_like(13, 1.0, 0.5, 0.5);
  const int64_t ranks = 3;
  const int64_t v = 2;
  const StagePartition p = balance(costs, ranks * v);
  ASSERT_EQ(p.num_stages(), 6);
  EXPECT_EQ(rank_of_stage(p.stage_of(0), ranks), 0);
  EXPECT_EQ(rank_of_stage(p.stage_of(p.layers - 1), ranks), 2);
  EXPECT_EQ(rank_of_stage(4, ranks), 1);
  EXPECT_NE(error_of([] { rank_of_stage(1, 0); }).find("ranks must be >= 1"), std::string::npos);
}

TEST(PipelinePartition, BalanceRejectsBadStageCounts) {
  const auto costs = gpt_like(5, 1.0, 1.0, 1.0);  // 7 layers
  const std::string more = error_of([&] { balance(costs, 8); });
  EXPECT_NE(more.find("8 stages for only 7 layers"), std::string::npos) << more;
  EXPECT_NE(error_of([&] { balance(costs, 0); }).find("stages must be >= 1, got 0"),
            std::string::npos);
  auto negative = costs;
  negative[3].cost = -1.0;
  EXPECT_NE(error_of([&] { balance(negative, 2); }).find("'h.2'"), std::string::npos);
  EXPECT_EQ(balance(costs, 7).sizes(), (std::vector<int64_t>(7, 1)));
}

TEST(PipelinePartition, ExplicitSpecRoundTrips) {
  const auto names = layer_names(gpt_like(13, 1.0, 0.0, 0.0));
  const StagePartition p = explicit_partition("3,4,4,2", names);
  EXPECT_EQ(p.first, (std::vector<int64_t>{0, 4, 8, 12}));
  EXPECT_EQ(p.layers, 15);
  EXPECT_EQ(p.stage_of(14), 3);
  EXPECT_EQ(to_spec(p, names), "3,4,4,2");
  EXPECT_EQ(explicit_partition(" 13 ", names).num_stages(), 1);
  for (int64_t stages = 1; stages <= 5; ++stages) {
    const auto costs = gpt_like(13, 1.0, 0.7, 2.5);
    const StagePartition b = balance(costs, stages);
    EXPECT_EQ(explicit_partition(to_spec(b, names), names), b) << stages;
  }
}

TEST(PipelinePartition, ExplicitSpecErrorsNameTheProblem) {
  const auto names = layer_names(gpt_like(7, 1.0, 0.0, 0.0));
  auto err = [&](const std::string& spec) {
    return error_of([&] { explicit_partition(spec, names); });
  };
  EXPECT_NE(err("3,3").find("counts sum to 6 but the model has 7 blocks"), std::string::npos);
  EXPECT_NE(err("3,0,4").find("stage 1 has 0 blocks"), std::string::npos);
  EXPECT_NE(err("3,x,4").find("'x' is not a block count"), std::string::npos);
  EXPECT_NE(err("3,-1,5").find("'-1' is not a block count"), std::string::npos);
  EXPECT_NE(err("3,,4").find("is not a block count"), std::string::npos);
  EXPECT_NE(err("").find("expected block counts"), std::string::npos);
  EXPECT_NE(err("3,4,").find("expected block counts"), std::string::npos);
  EXPECT_NE(error_of([] {
              explicit_partition("1", {"a", "b"});
            }).find("no block layers"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              explicit_partition("2", {"h.0", "x", "h.1"});
            }).find("'x'"),
            std::string::npos);
  // A balanced split that puts the embedding alone cannot be written as block counts.
  StagePartition alone{{0, 1}, static_cast<int64_t>(names.size())};
  EXPECT_NE(error_of([&] { to_spec(alone, names); }).find("stage 0 holds no block"),
            std::string::npos);
}

}  // namespace
}  // namespace tessel::parallel::pipeline
