// SPDX-License-Identifier: Apache-2.0
// Checkpoints of offloaded runs: saving streams the chunks from whichever tier holds them (NVMe
// included) into the same pieces an in-memory run writes, byte for byte; resuming reads them back
// chunk by chunk. An in-memory checkpoint resumes offloaded and an offloaded one in memory or
// offloaded, each bitwise equal to the uninterrupted run (losses, gradient norms, and every
// parameter and moment of the final checkpoint). The `mem` figure counts the tiers' pools.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "offload_test_util.h"
#include "tessel/train/checkpoint/checkpoint.h"

namespace tessel::train {
namespace {

using test::collect;
using test::odd_config;
using test::offloaded;
using test::scratch;
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << p;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void expect_same_steps(const std::vector<StepRecord>& full, const std::vector<StepRecord>& tail,
                       const std::string& what) {
  ASSERT_LE(tail.size(), full.size()) << what;
  const size_t skip = full.size() - tail.size();
  for (size_t i = 0; i < tail.size(); ++i) {
    EXPECT_EQ(tail[i].step, full[skip + i].step) << what;
    EXPECT_EQ(tail[i].loss, full[skip + i].loss) << what << ", step " << tail[i].step;
    EXPECT_EQ(tail[i].grad_norm, full[skip + i].grad_norm) << what << ", step " << tail[i].step;
  }
}

// The checkpoint's data files equal: the HF model and the pieces (parameters and moments).
void expect_same_checkpoint(const fs::path& a, const fs::path& b, const std::string& what) {
  for (const char* file : {"model.safetensors", "pieces_00000_of_00001.safetensors"})
    EXPECT_TRUE(slurp(a / file) == slurp(b / file)) << what << ": " << file << " differs";
}

TEST(OffloadCheckpoint, ResumesInEitherLayoutBitwise) {
  const auto dir = scratch("offload_ckpt");
  fs::create_directories(dir / "nvme");
  const std::string nvme = (dir / "nvme").string();
  TrainConfig plain = odd_config(dir, "plain", 12);
  plain.checkpoint.interval = 6;
  const size_t need = test::device_chunks_needed(plain);
  auto off = [&](const std::string& run) {
    TrainConfig c = offloaded(plain, need, 4, nvme);
    c.checkpoint.dir = (dir / run).string();
    return c;
  };

  std::vector<StepRecord> a, b;
  Trainer(plain, "", collect(&a)).run();
  {
    Trainer t(off("off"), "", collect(&b));
    const memory::ChunkManager& chunks = t.offload()->chunks();
    ASSERT_GT(size_t(chunks.num_chunks()), need + 4) << "the budgets must leave chunks on NVMe";
    t.run();
    // Saved from every tier: chunks were on NVMe when the checkpoints were written.
    EXPECT_GT(chunks.nvme_bytes_in_use(), 0u);
  }
  ASSERT_EQ(a.size(), 12u);
  expect_same_steps(a, b, "offloaded");
  const fs::path plain6 = dir / "plain" / "step_000006", off6 = dir / "off" / "step_000006";
  EXPECT_NO_THROW(verify_checkpoint(off6.string()));
  expect_same_checkpoint(plain6, off6, "step 6, offloaded vs in memory");
  expect_same_checkpoint(dir / "plain" / "step_000012", dir / "off" / "step_000012",
                         "step 12, offloaded vs in memory");

  struct Case {
    std::string what, run;
    fs::path from;
    bool offload;
  };
  for (const Case& k : {Case{"in memory -> offloaded", "r1", plain6, true},
                        Case{"offloaded -> in memory", "r2", off6, false},
                        Case{"offloaded -> offloaded", "r3", off6, true}}) {
    TrainConfig c = k.offload ? off(k.run) : plain;
    c.checkpoint.dir = (dir / k.run).string();
    std::vector<StepRecord> tail;
    Trainer t(c, k.from.string(), collect(&tail));
    EXPECT_EQ(t.step(), 6) << k.what;
    EXPECT_EQ(t.offload() != nullptr, k.offload) << k.what;
    t.run();
    ASSERT_EQ(tail.size(), 6u) << k.what;
    expect_same_steps(a, tail, k.what);
    expect_same_checkpoint(dir / "plain" / "step_000012", dir / k.run / "step_000012", k.what);
  }
  fs::remove_all(dir);
}

TEST(OffloadCheckpoint, AStopSavesAndTheMemFigureCountsTheTiers) {
  const auto dir = scratch("offload_stop");
  fs::create_directories(dir / "nvme");
  const TrainConfig plain = odd_config(dir, "plain", 50);
  const size_t need = test::device_chunks_needed(plain);
  TrainConfig c = offloaded(odd_config(dir, "run", 50), need, 4, (dir / "nvme").string());
  std::vector<StepRecord> steps;
  std::vector<std::string> lines;
  TrainerHooks h = collect(&steps, &lines);
  h.on_step = [&steps](const StepRecord& r) {
    steps.push_back(r);
    if (r.step == 3) request_stop(15);
  };
  c.log.interval = 1;
  Trainer t(c, "", h);
  const TrainSummary s = t.run();
  EXPECT_TRUE(s.interrupted);
  EXPECT_EQ(fs::path(s.last_checkpoint).filename(), "step_000003");
  EXPECT_NO_THROW(verify_checkpoint(s.last_checkpoint));
  ASSERT_EQ(steps.size(), 3u);
  for (const StepRecord& r : steps) {
    // The pools hold the state outside the CPU allocator; `mem` counts them.
    ASSERT_GT(r.offload_device_bytes + r.offload_host_bytes, 0);
    EXPECT_GE(r.mem_bytes, r.offload_device_bytes + r.offload_host_bytes);
    EXPECT_GE(r.mem_peak_bytes, r.mem_bytes);
    EXPECT_GT(r.offload_nvme_bytes, 0);
  }
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  EXPECT_NE(all.find("; holds device "), std::string::npos) << all;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessel::train
