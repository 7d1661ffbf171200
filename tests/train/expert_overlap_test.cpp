// SPDX-License-Identifier: Apache-2.0
// The experts' gradient reductions under expert parallelism with dp (thread worlds shaped as
// `--dp 4 --ep 2`: expert-dp groups of two) are launched during the last micro-batch's backward,
// as the dense buckets are, and give bit for bit the results of reducing after backward
// (`parallel.overlap=false`): the same losses, gradient norms and final parameters, at ZeRO 0, 1
// and 2, with gradient accumulation (the first micro-batch does not communicate).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_checks.h"
#include "tessel/train/layout.h"
#include "tessel/train/trainer.h"
#include "trainer_test_util.h"

namespace tessel::train {
namespace {

constexpr int kDp = 4, kEp = 2;
constexpr int64_t kSteps = 4;

// test::tiny_moe_model: pairs dropped by the capacity.
TrainConfig moe_config(const std::filesystem::path& dir, int zero_stage, bool overlap) {
  TrainConfig c = test::base_config(dir, 37, kSteps);
  std::ofstream(dir / "config.json") << test::tiny_moe_model(37).to_json();
  c.train.threads = 1;
  c.train.micro_batch = 1;
  c.train.grad_accum = 2;
  c.parallel.zero_stage = zero_stage;
  c.parallel.overlap = overlap;
  c.checkpoint.dir = (dir / (overlap ? "during" : "after")).string();
  return c;
}

struct Run {
  std::vector<StepRecord> steps[kDp];
  std::map<std::string, std::vector<float>> params[kDp];  // every rank's parameters at the end
};

Run train_ep(const TrainConfig& c) {
  Run out;
  std::mutex mu;
  tessel::test::run_thread_world(kDp, [&](dist::CommPtr world) {
    const int rank = world->rank();
    TrainerHooks h;
    h.print = [](const std::string&) {};
    h.on_step = [&out, &mu, rank](const StepRecord& r) {
      std::lock_guard<std::mutex> lock(mu);
      out.steps[rank].push_back(r);
    };
    Trainer trainer(c, "", h, make_layout(world, kDp, 1, 1, kEp));
    trainer.run();
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [name, p] : trainer.model().named_parameters())
      out.params[rank][name] = p.to_vector<float>();
  });
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_overlap(int zero_stage) {
  const auto dir = test::scratch("expert_overlap_" + std::to_string(zero_stage));
  const Run after = train_ep(moe_config(dir, zero_stage, false));
  const Run during = train_ep(moe_config(dir, zero_stage, true));
  for (int rank = 0; rank < kDp; ++rank) {
    ASSERT_EQ(after.steps[rank].size(), size_t(kSteps));
    ASSERT_EQ(during.steps[rank].size(), size_t(kSteps));
    for (size_t i = 0; i < size_t(kSteps); ++i) {
      const StepRecord &a = after.steps[rank][i], &d = during.steps[rank][i];
      // Every expert bucket of the rank: none launched before backward ended without overlap,
      // all of them during it with overlap (every rank's experts get rows here).
      EXPECT_GT(a.expert_reductions, 0) << "rank " << rank;
      EXPECT_EQ(a.expert_reductions_in_backward, 0) << "rank " << rank << " step " << i + 1;
      EXPECT_EQ(d.expert_reductions, a.expert_reductions);
      EXPECT_EQ(d.expert_reductions_in_backward, d.expert_reductions)
          << "rank " << rank << " step " << i + 1;
      EXPECT_EQ(d.loss, a.loss) << "rank " << rank << " step " << i + 1;
      EXPECT_EQ(d.grad_norm, a.grad_norm) << "rank " << rank << " step " << i + 1;
    }
    ASSERT_EQ(during.params[rank].size(), after.params[rank].size());
    for (const auto& [name, values] : after.params[rank])
      EXPECT_TRUE(same_bits(during.params[rank].at(name), values))
          << "rank " << rank << " parameter " << name;
  }
  std::filesystem::remove_all(dir);
}

TEST(ExpertGradientOverlap, ZeroStage0SumsDuringBackwardBitwiseAsAfter) {
  check_overlap(0);
}
TEST(ExpertGradientOverlap, ZeroStage1AllReducesDuringBackwardBitwiseAsAfter) {
  check_overlap(1);
}
TEST(ExpertGradientOverlap, ZeroStage2ReduceScattersDuringBackwardBitwiseAsAfter) {
  check_overlap(2);
}

}  // namespace
}  // namespace tessel::train
