// SPDX-License-Identifier: Apache-2.0
// fp16 dynamic loss scaling under expert parallelism (thread worlds shaped as `--dp 4 --ep 2`):
// an overflow in one rank's experts skips the step on every rank and halves the scale there.
// The test places the inf where the global norm cannot carry it: without ZeRO the norm is summed
// over each ep group only (the experts of an ep group's ranks are the whole model's), and the
// ranks of the other ep group hold the same experts, already summed. Only the overflow flag,
// agreed over the data-parallel group that holds the ep and expert-dp groups, reaches them (with
// the flag agreed over ep alone, ranks 0 and 1 take step 3 and keep the scale: this test fails).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
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
constexpr int64_t kSteps = 5;

// test::tiny_moe_model: pairs dropped by the capacity.
TrainConfig moe_config(const std::filesystem::path& dir) {
  TrainConfig c = test::base_config(dir, 37, kSteps);
  std::ofstream(dir / "config.json") << test::tiny_moe_model(37).to_json();
  c.train.threads = 1;
  c.train.micro_batch = 1;
  c.train.precision = "fp16";
  c.train.loss_scale_init = 256;
  return c;
}

struct EpRun {
  std::vector<StepRecord> steps[kDp];
};

// `inject(trainer, rank, step)` runs after each step's gradients are summed over every axis.
EpRun train_ep(const TrainConfig& c, std::function<void(Trainer&, int, int64_t)> inject) {
  EpRun out;
  std::mutex mu;
  tessel::test::run_thread_world(kDp, [&](dist::CommPtr world) {
    const int rank = world->rank();
    TrainerHooks h;
    h.print = [](const std::string&) {};
    h.on_step = [&out, &mu, rank](const StepRecord& r) {
      std::lock_guard<std::mutex> lock(mu);
      out.steps[rank].push_back(r);
    };
    Trainer* self = nullptr;
    h.after_backward = [&, rank](int64_t step) { inject(*self, rank, step); };
    Trainer trainer(c, "", h, make_layout(world, kDp, 1, 1, kEp));
    self = &trainer;
    trainer.run();
  });
  return out;
}

TEST(PrecisionExpertParallel, OverflowInOneRanksExpertsSkipsTheStepEverywhere) {
  const auto dir = test::scratch("precision_ep_overflow");
  const TrainConfig c = moe_config(dir);
  std::atomic<int> injected{0};
  const EpRun r = train_ep(c, [&](Trainer& t, int rank, int64_t step) {
    if (rank != 3 || step != 3) return;  // ep rank 1 of the second ep group
    for (auto& [name, p] : t.model().named_parameters()) {
      if (name.find(".experts.") == std::string::npos || !p.grad().defined()) continue;
      p.grad().data<float>()[0] = std::numeric_limits<float>::infinity();
      ++injected;
      return;
    }
  });
  EXPECT_EQ(injected.load(), 1);
  for (int rank = 0; rank < kDp; ++rank) {
    const auto& s = r.steps[rank];
    ASSERT_EQ(s.size(), size_t(kSteps)) << "rank " << rank;
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_TRUE(s[i].expert_parallel);
      EXPECT_EQ(s[i].skipped, i == 2) << "rank " << rank << " step " << i + 1;
      EXPECT_EQ(s[i].overflow, i == 2) << "rank " << rank << " step " << i + 1;
      EXPECT_EQ(s[i].loss_scale, i <= 2 ? 256.0 : 128.0) << "rank " << rank << " step " << i + 1;
      EXPECT_TRUE(std::isfinite(s[i].loss)) << "rank " << rank << " step " << i + 1;
      // Every rank of an ep group computes the same norm; both groups do once the flag agreed.
      EXPECT_EQ(s[i].loss, r.steps[0][i].loss) << "rank " << rank << " step " << i + 1;
      if (i != 2) {
        EXPECT_EQ(s[i].grad_norm, r.steps[0][i].grad_norm) << "rank " << rank;
      }
    }
  }
  // The norm did not carry the inf to the first ep group: its ranks skipped on the flag alone.
  EXPECT_TRUE(std::isfinite(r.steps[0][2].grad_norm));
  EXPECT_FALSE(std::isfinite(r.steps[3][2].grad_norm));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessel::train
