// SPDX-License-Identifier: Apache-2.0
// Checkpoints stream (docs/TRAINING.md, Checkpoints > Memory): saving a checkpoint and resuming
// from it raise the process's resident set by at most the documented staging bound plus a
// documented tolerance, never by a copy of the state. Each measurement is its own `tessel train`
// process, read back from the JSONL records the trainer writes around the save and the load
// (resident set before, its sampled peak during the operation, after). The model is GPT-2 768 x 12
// with a byte-level vocabulary (85M parameters, 1.36 GB of f32 state): a second copy of the state,
// or of the parameters alone, would exceed the bound many times over. The step records carry the
// resident set beside the allocator's figures, for every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>

#include "train_workspace.h"

namespace tessel::cli_test {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;
// docs/TRAINING.md: what a save or load may buffer (64 MiB) plus the tolerance for what is not a
// tensor (64 MiB: JSON of the piece index, the heap's own bookkeeping, page tables, stacks).
constexpr int64_t kStagingBound = 64 * kMiB;
constexpr int64_t kTolerance = 64 * kMiB;

std::vector<nlohmann::json> records_with(const fs::path& jsonl, const std::string& key) {
  std::vector<nlohmann::json> out;
  std::ifstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains(key)) out.push_back(j);
  }
  return out;
}

// What the operation held beyond the state it wrote or read: its sampled peak above where the
// resident set began or (a load makes its destination resident) ended.
int64_t added(const nlohmann::json& rank) {
  return rank.at("peak_rss_during_bytes").get<int64_t>() -
         std::max(rank.at("rss_before_bytes").get<int64_t>(),
                  rank.at("rss_after_bytes").get<int64_t>());
}

TEST(CheckpointMemory, SaveAndResumeStayWithinTheStagingBound) {
  const Workspace s = make_workspace("memory", 768, 12);
  const std::string run = (s.dir / "run").string();
  const std::string args = s.common +
                           " --set train.micro_batch=1 --set train.seq_len=16"
                           " --set optim.warmup_steps=1 --set eval.interval=0 --set eval.batches=1"
                           " --set sample.tokens=0 --set checkpoint.dir=" +
                           run;
  const Outcome first = run_tessel(args + " --set train.steps=1", s.dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const Outcome resumed = run_tessel("train --resume " + run + " --set train.steps=2", s.dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("checkpoint load at step 1"), std::string::npos) << resumed.out;

  const fs::path jsonl = fs::path(run) / "train.jsonl";
  const auto steps = steps_of(jsonl);
  ASSERT_EQ(steps.size(), 2u);
  // Parameters and moments: what is resident between steps (gradients are freed after a step).
  const int64_t state =
      steps[0].at("param_bytes").get<int64_t>() + steps[0].at("optimizer_bytes").get<int64_t>();
  // A copy of the parameters alone (a third of that) would break the bound twice over.
  ASSERT_GT(state / 3, 2 * (kStagingBound + kTolerance)) << "the model is too small to show a copy";

  const auto events = records_with(jsonl, "checkpoint_event");
  int saves = 0, loads = 0;
  for (const auto& e : events) {
    ASSERT_EQ(e.at("ranks").size(), 1u) << e.dump();
    if (e.at("checkpoint_event") == "build") continue;  // the model's construction (its own test)
    const auto& r = e.at("ranks")[0];
    // The state is resident after the operation (and before a save).
    EXPECT_GT(r.at("rss_after_bytes").get<int64_t>(), state) << e.dump();
    if (e.at("checkpoint_event") == "save") {
      EXPECT_GT(r.at("rss_before_bytes").get<int64_t>(), state) << e.dump();
    }
    EXPECT_LE(added(r), kStagingBound + kTolerance)
        << e.at("checkpoint_event") << " at step " << e.at("checkpoint_step") << " added "
        << added(r) / kMiB << " MiB: " << e.dump();
    (e.at("checkpoint_event") == "save" ? saves : loads) += 1;
    std::cout << "checkpoint " << e.at("checkpoint_event").get<std::string>() << " at step "
              << e.at("checkpoint_step") << ": resident set "
              << r.at("rss_before_bytes").get<int64_t>() / kMiB << " MiB before, "
              << r.at("peak_rss_during_bytes").get<int64_t>() / kMiB << " MiB peak during, "
              << r.at("rss_after_bytes").get<int64_t>() / kMiB << " MiB after, added "
              << added(r) / kMiB << " MiB\n";
  }
  EXPECT_EQ(saves, 2);  // the first run's final save, and the resumed run's
  EXPECT_EQ(loads, 1);

  // The step records: the resident set beside the allocator's count, for every rank.
  for (const auto& j : steps) {
    ASSERT_EQ(j.at("ranks").size(), 1u) << j.dump();
    const auto& r = j.at("ranks")[0];
    EXPECT_EQ(r.at("rss_bytes"), j.at("rss_bytes"));
    EXPECT_EQ(r.at("rss_peak_bytes"), j.at("rss_peak_bytes"));
    EXPECT_EQ(r.at("mem_bytes"), j.at("mem_bytes"));
    EXPECT_GE(j.at("rss_bytes").get<int64_t>(), j.at("mem_bytes").get<int64_t>() - kTolerance);
    EXPECT_GE(j.at("rss_peak_bytes").get<int64_t>(), j.at("rss_bytes").get<int64_t>());
    EXPECT_GE(j.at("rss_peak_bytes").get<int64_t>(),
              j.at("mem_peak_bytes").get<int64_t>() - kTolerance);
  }
  EXPECT_NE(first.out.find("| RSS "), std::string::npos) << first.out;
}

}  // namespace
}  // namespace tessel::cli_test
