// SPDX-License-Identifier: Apache-2.0
// Training with the model's state in chunks across the device, host and NVMe tiers: budgets so
// small that every tier holds chunks give bitwise the losses, gradient norms, validation loss and
// parameters of the in-memory run (odd sizes, gradient accumulation, clipping); the pools'
// accounting holds after every step and their peaks stay within the budgets; the step records
// carry the traffic; an unusable NVMe directory and budgets below one step's working set are
// refused before any step, naming the smallest budget that works (and that budget works); the host
// allocator keeps an offloaded step's large blocks from one step to the next.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "offload_test_util.h"
#include "tessel/tensor/host_memory.h"
#include "tessel/train/trainer.h"

namespace tessel::train {
namespace {

using memory::AccessMode;
using memory::Tier;
using test::collect;
using test::kChunk;
using test::odd_config;
using test::offloaded;
using test::scratch;
namespace fs = std::filesystem;

std::string error_of(const TrainConfig& c) {
  try {
    Trainer t(c, "", collect(nullptr));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Offload, EveryTierGivesBitwiseTheInMemoryRun) {
  const auto dir = scratch("offload_equal");
  fs::create_directories(dir / "nvme");
  const TrainConfig plain = odd_config(dir, "run_plain");
  // The smallest device tier the layout allows (from a roomy first build), the smallest host
  // tier, and NVMe for the rest.
  const size_t need = test::device_chunks_needed(plain);
  const TrainConfig off = offloaded(odd_config(dir, "run_off"), need, 4, (dir / "nvme").string());

  std::vector<StepRecord> a, b;
  std::vector<std::string> lines;
  Trainer in_memory(plain, "", collect(&a));
  const TrainSummary sa = in_memory.run();
  Trainer chunked(off, "", collect(&b, &lines));
  ASSERT_NE(chunked.offload(), nullptr);
  memory::ChunkManager& chunks = chunked.offload()->chunks();
  const int n = chunks.num_chunks();
  ASSERT_GT(size_t(n), need + 4) << "the budgets must leave chunks on NVMe";
  const TrainSummary sb = chunked.run();

  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  int64_t nvme_reads = 0, h2d = 0, d2h = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].loss, b[i].loss) << "step " << i + 1;
    EXPECT_EQ(a[i].grad_norm, b[i].grad_norm) << "step " << i + 1;
    EXPECT_TRUE(b[i].offload);
    nvme_reads += b[i].offload_nvme_read_bytes;
    h2d += b[i].offload_h2d_bytes;
    d2h += b[i].offload_d2h_bytes;
  }
  EXPECT_GT(nvme_reads, 0);
  EXPECT_GT(h2d, 0);
  EXPECT_GT(d2h, 0);
  ASSERT_TRUE(sa.val_loss && sb.val_loss);
  EXPECT_EQ(*sa.val_loss, *sb.val_loss);  // the evaluation's forward through the chunks
  // Later steps run on the traced schedule: reads issued ahead of use.
  EXPECT_GT(chunks.stats().prefetch_reads, 0);

  // Every parameter, bitwise, read in the host tier.
  const NamedTensors pa = in_memory.model().named_parameters();
  const NamedTensors pb = chunked.model().named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const int id = chunks.chunk_of(pb[i].second);
    chunks.access(id, AccessMode::Read, Tier::Host);
    EXPECT_EQ(0,
              std::memcmp(pa[i].second.data_ptr(), pb[i].second.data_ptr(), pa[i].second.nbytes()))
        << pa[i].first;
    chunks.release(id);
  }
  chunks.check_accounting();
  for (Tier t : {Tier::Device, Tier::Host})
    EXPECT_LE(chunks.pool(t).peak_bytes(), chunks.pool(t).budget()) << memory::tier_name(t);

  // Where every state lives, at start; the traffic in the progress line and the JSONL.
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  EXPECT_NE(all.find("memory offload: " + std::to_string(n) + " chunks"), std::string::npos);
  EXPECT_NE(all.find("h.2.mlp.c_fc.weight: param chunk"), std::string::npos) << all;
  EXPECT_NE(all.find("| offload h2d"), std::string::npos) << all;
  std::ifstream log(fs::path(off.checkpoint.dir) / "train.jsonl");
  std::string line;
  int with_traffic = 0;
  while (std::getline(log, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("offload") && j["offload"].contains("nvme_read_gbps")) ++with_traffic;
  }
  EXPECT_EQ(with_traffic, 20);
  fs::remove_all(dir);
}

TEST(Offload, RefusesUnusableSettingsNamingTheSmallestBudget) {
  const auto dir = scratch("offload_refuse");
  fs::create_directories(dir / "nvme");
  const TrainConfig c = odd_config(dir, "run");
  const std::string nvme = (dir / "nvme").string();

  // An NVMe directory that is a file, or does not exist.
  std::ofstream(dir / "a_file") << "x";
  std::string e = error_of(offloaded(c, 64, 4, (dir / "a_file").string()));
  EXPECT_NE(e.find("memory.nvme_dir"), std::string::npos) << e;
  EXPECT_NE(e.find("not a directory"), std::string::npos) << e;
  e = error_of(offloaded(c, 64, 4, (dir / "missing" / "deeper").string()));
  EXPECT_NE(e.find("memory.nvme_dir"), std::string::npos) << e;
  // A directory nobody may create files in: /proc refuses root too.
  e = error_of(offloaded(c, 64, 4, "/proc"));
  EXPECT_NE(e.find("memory.nvme_dir /proc is not writable: cannot create /proc/"),
            std::string::npos)
      << e;
  if (geteuid() != 0) {  // root writes through permission bits
    const fs::path locked = dir / "readonly";
    fs::create_directories(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    e = error_of(offloaded(c, 64, 4, locked.string()));
    fs::permissions(locked, fs::perms::owner_all);
    EXPECT_NE(e.find("is not writable"), std::string::npos) << e;
    EXPECT_NE(e.find("Permission denied"), std::string::npos) << e;
  }

  // A device tier of two chunks: below one step's working set; the budget named works.
  e = error_of(offloaded(c, 2, 4, nvme));
  const std::string key = "the smallest device budget that works is ";
  ASSERT_NE(e.find(key), std::string::npos) << e;
  const size_t need = std::stoull(e.substr(e.find(key) + key.size()));
  EXPECT_EQ(need % kChunk, 0u);
  EXPECT_GT(need, 2 * kChunk);
  EXPECT_EQ(error_of(offloaded(c, need / kChunk, 4, nvme)), "");
  // A host tier below the optimizer's row of four chunks.
  e = error_of(offloaded(c, need / kChunk, 3, nvme));
  EXPECT_NE(e.find("smallest host budget that works is " + std::to_string(4 * kChunk)),
            std::string::npos)
      << e;
  // Without NVMe the host tier holds every chunk.
  e = error_of(offloaded(c, need / kChunk, 4, ""));
  EXPECT_NE(e.find("without memory.nvme_dir the host tier holds every chunk"), std::string::npos)
      << e;
  // Mixed precision: the update also rounds its row into a chunk of 16-bit copies, five chunks
  // in the host tier at once (offload_precision_equivalence.py runs it).
  for (const std::string precision : {"bf16", "fp16"}) {
    TrainConfig mixed = offloaded(c, 64, 4, nvme);
    mixed.train.precision = precision;
    e = error_of(mixed);
    EXPECT_NE(e.find("rounds it into a chunk of its 16-bit copies"), std::string::npos) << e;
    EXPECT_NE(e.find("smallest host budget that works is " + std::to_string(5 * kChunk)),
              std::string::npos)
        << e;
    mixed.memory.host_budget = std::to_string(5 * kChunk);
    EXPECT_EQ(error_of(mixed), "") << precision;
  }
  // memory.nvme_budget: too small for the n chunks to fit the tiers, refused; below the n - M + 1
  // chunks eviction can leave on NVMe (M = 4, the host tier's), refused naming that size, which
  // works; without an NVMe directory, refused by name.
  TrainConfig capped = offloaded(c, need / kChunk, 4, nvme);
  capped.memory.nvme_budget = std::to_string(kChunk);
  e = error_of(capped);
  ASSERT_NE(e.find(" chunks of "), std::string::npos) << e;
  EXPECT_NE(e.find("do not fit the tiers"), std::string::npos) << e;
  EXPECT_NE(e.find("(or raise memory.nvme_budget)"), std::string::npos) << e;
  const size_t n = std::stoull(e.substr(e.find("the ") + 4));
  capped.memory.nvme_budget = std::to_string((n - 4) * kChunk);
  e = error_of(capped);
  EXPECT_NE(e.find("the smallest NVMe budget that works is " + std::to_string((n - 3) * kChunk)),
            std::string::npos)
      << e;
  const size_t slots = (n - 3) * kChunk;
  capped.memory.nvme_budget = std::to_string(slots);
  EXPECT_EQ(error_of(capped), "");
  capped.memory.nvme_dir = "";
  capped.memory.host_budget = "64MiB";
  e = error_of(capped);
  EXPECT_NE(
      e.find("memory.nvme_budget = \"" + std::to_string(slots) + "\" without memory.nvme_dir"),
      std::string::npos)
      << e;
  TrainConfig bad = offloaded(c, 64, 64, "");
  bad.memory.device_budget = "12 parsecs";
  e = error_of(bad);
  EXPECT_NE(e.find("memory.device_budget = \"12 parsecs\" is not a size"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(Offload, RecomputeGivesBitwiseTheInMemoryRunWithTheSameMode) {
  // Recomputation replays a block's forward (full) or its attention core (selective) inside the
  // block's backward, while the block's chunks are held for that backward: the replay reads the
  // same values in the device tier. Against the in-memory run with the same mode, every tier in
  // use.
  for (const std::string mode : {"full", "selective"}) {
    const auto dir = scratch("offload_recompute_" + mode);
    fs::create_directories(dir / "nvme");
    TrainConfig plain = odd_config(dir, "run_plain", 6);
    plain.train.recompute = mode;
    const size_t need = test::device_chunks_needed(plain);
    TrainConfig off = offloaded(odd_config(dir, "run_off", 6), need, 4, (dir / "nvme").string());
    off.train.recompute = mode;
    std::vector<StepRecord> a, b;
    Trainer in_memory(plain, "", collect(&a));
    in_memory.run();
    Trainer chunked(off, "", collect(&b));
    chunked.run();
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 6u);
    int64_t nvme_reads = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].loss, b[i].loss) << mode << " step " << i + 1;
      EXPECT_EQ(a[i].grad_norm, b[i].grad_norm) << mode << " step " << i + 1;
      nvme_reads += b[i].offload_nvme_read_bytes;
    }
    EXPECT_GT(nvme_reads, 0) << mode;
    memory::ChunkManager& chunks = chunked.offload()->chunks();
    const NamedTensors pa = in_memory.model().named_parameters();
    const NamedTensors pb = chunked.model().named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      const int id = chunks.chunk_of(pb[i].second);
      chunks.access(id, AccessMode::Read, Tier::Host);
      EXPECT_EQ(
          0, std::memcmp(pa[i].second.data_ptr(), pb[i].second.data_ptr(), pa[i].second.nbytes()))
          << mode << " " << pa[i].first;
      chunks.release(id);
    }
    chunks.check_accounting();
    fs::remove_all(dir);
  }
}

// The host allocator's large-block cache follows the offloaded step's cycle (docs/MEMORY.md, "The
// host allocator's spare"): with an embedding of 8192 x 32 (1 MiB, whose gradient is a mapped
// temporary on its way into its chunk) and logits of 4 x 32 x 8192 (4 MiB, two alive at once) the
// step needs more spare than 1/8 of the cache's mark, which no longer counts the state. Without
// following, every step remaps blocks (page faults); with it, none after the first steps.
TEST(Offload, TheHostAllocatorKeepsTheStepsBlocksAcrossSteps) {
  const auto dir = scratch("offload_host_cycle");
  TrainConfig c = test::base_config(dir, 8192, 8);
  c.train.micro_batch = 4;
  c.train.seq_len = 32;
  const size_t chunk = size_t(2) << 20;
  c.memory.chunk_size = std::to_string(chunk);
  c.memory.device_budget = std::to_string(8 * chunk);
  c.memory.host_budget = std::to_string(32 * chunk);  // every chunk: no NVMe tier
  std::vector<int64_t> maps;
  TrainerHooks hooks = collect(nullptr);
  hooks.on_step = [&maps](const StepRecord&) { maps.push_back(host_block_maps()); };
  Trainer trainer(c, "", hooks);
  trainer.run();
  ASSERT_EQ(maps.size(), 8u);
  for (size_t i = 3; i < maps.size(); ++i)
    EXPECT_EQ(maps[i], maps[2]) << "step " << i + 1 << " mapped or remapped "
                                << maps[i] - maps[i - 1] << " blocks";
}

}  // namespace
}  // namespace tessel::train
