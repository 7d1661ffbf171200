// SPDX-License-Identifier: Apache-2.0
// Offloaded start-up streams (docs/MEMORY.md, The trainer > Start-up), measured by the operating
// system: `tessel train` of a GPT-2 whose f32 training state (parameters, gradients, two AdamW
// moments) is 1.6 GB, with a 256 MiB host tier and NVMe for the rest, never has more resident
// than its tiers' budgets, the two staging chunks sealing writes through, and a fixed allowance
// for the process itself (code, threads, dataset, heap bookkeeping): the peak resident set (VmHWM)
// after the model is built and laid out, and after one training step. A plain copy of the
// parameters alone (a quarter of the state) would exceed that bound.
#include <gtest/gtest.h>

#include <iostream>

#include "train_workspace.h"

namespace tessel::cli_test {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kChunk = 32 * kMiB;       // holds the largest tensor (4096 x 1024 f32)
constexpr int64_t kDevice = 10 * kChunk;    // one step's working set (8 chunks) and room
constexpr int64_t kHost = 8 * kChunk;       // 256 MiB
constexpr int64_t kStaging = 2 * kChunk;    // sealing fills chunks bound for NVMe in two
constexpr int64_t kAllowance = 160 * kMiB;  // the process without the state

TEST(TrainOffloadStartup, PeakResidentSetStaysWithinTheBudgets) {
  // GPT-2 1024 x 8 over the byte-level vocabulary: 101M parameters.
  const Workspace s = make_workspace("offload_startup", 1024, 8);
  const fs::path nvme = s.dir / "nvme", run = s.dir / "run";
  fs::create_directories(nvme);
  const std::string args =
      s.common +
      " --set train.micro_batch=1 --set train.seq_len=16 --set train.steps=1"
      " --set optim.warmup_steps=1 --set eval.interval=0 --set sample.tokens=0"
      " --set memory.chunk_size=" +
      std::to_string(kChunk) + " --set memory.device_budget=" + std::to_string(kDevice) +
      " --set memory.host_budget=" + std::to_string(kHost) +
      " --set memory.nvme_dir=" + nvme.string() + " --set checkpoint.dir=" + run.string();
  const Outcome out = run_tessel(args, s.dir);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_NE(out.out.find("memory offload: "), std::string::npos) << out.out;

  const fs::path jsonl = run / "train.jsonl";
  const auto steps = steps_of(jsonl);
  ASSERT_EQ(steps.size(), 1u);
  const int64_t params = steps[0].at("param_bytes").get<int64_t>();
  const int64_t state = 4 * params;  // parameters, gradients, two moments: all f32
  const int64_t bound = kDevice + kHost + kStaging + kAllowance;
  // The model is large enough that a copy of its parameters alone breaks the bound.
  ASSERT_GT(params, 400 * kMiB - 16 * kMiB);
  ASSERT_GT(kDevice + kHost + params, bound) << "the model is too small to show a copy";

  int64_t build_peak = -1;
  std::ifstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("checkpoint_event", "") == "build")
      build_peak = j.at("ranks")[0].at("peak_rss_after_bytes").get<int64_t>();
  }
  ASSERT_GE(build_peak, 0) << "no build record in " << jsonl;
  const int64_t step_peak = steps[0].at("rss_peak_bytes").get<int64_t>();
  std::cout << "state " << state / kMiB << " MiB; bound " << bound / kMiB
            << " MiB; peak resident set after start-up " << build_peak / kMiB
            << " MiB, after one step " << step_peak / kMiB << " MiB\n";
  EXPECT_LE(build_peak, bound);
  EXPECT_LE(step_peak, bound);
  EXPECT_LT(build_peak, state / 2);  // well below the state it started
}

}  // namespace
}  // namespace tessel::cli_test
