// SPDX-License-Identifier: Apache-2.0
// memory.nvme_budget and the swap file: eviction leaves at most n - M + 1 chunks on NVMe at once
// (M the chunks of the host budget, or of the device's with no host tier). With a budget of
// exactly that many the file reserved at start has that size, and random ReadWrite accesses over
// every chunk (every eviction a write needing a slot, prefetch reads in flight) never find every
// slot taken, contents exact; a budget one chunk smaller is refused at seal(), naming the
// smallest that works, instead of failing in the middle of a step. Budget 0: a slot per chunk.
#include <gtest/gtest.h>

#include <random>

#include "common/error_text.h"
#include "memory_test_util.h"
#include "tessel/memory/chunk_manager.h"

namespace tessel::memory {
namespace {

constexpr size_t kChunk = 8192;

MemoryConfig tiers(const std::string& dir, size_t device_chunks, size_t host_chunks,
                   size_t nvme_chunks = 0) {
  MemoryConfig config;
  config.nvme_budget = nvme_chunks * kChunk;
  config.chunk_bytes = kChunk;
  config.device_budget = device_chunks * kChunk;
  config.host_budget = host_chunks * kChunk;
  config.nvme_dir = dir;
  config.io_block_bytes = 4096;
  config.io_depth = 4;
  return config;
}

// 33 tensors of 33 * 13 f32 values: 4 per 8 KiB chunk, 9 chunks.
std::vector<Tensor> make_tensors(uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> out;
  for (int i = 0; i < 33; ++i) {
    out.push_back(randn({33, 13}, DType::F32, &gen));
    out.back().set_name("w" + std::to_string(i));
  }
  return out;
}

// Every access writes, so every eviction of a chunk is a write needing a slot; with a trace
// from step 100 prefetch reads are in flight when slots run out, too.
void random_writes(size_t device_chunks, size_t host_chunks, bool use_trace, uint64_t seed) {
  test::ScratchDir dir;
  const size_t full = host_chunks > 0 ? host_chunks : device_chunks;
  const size_t need = 9 - full + 1;
  ChunkManager manager(tiers(dir.str(), device_chunks, host_chunks, need));
  auto tensors = make_tensors(seed);
  std::vector<std::vector<float>> shadow;
  for (auto& t : tensors) {
    manager.add(t, "grad");
    shadow.push_back(t.to_vector<float>());
  }
  manager.seal();
  ASSERT_EQ(manager.num_chunks(), 9);
  const size_t want = need * kChunk;
  ASSERT_EQ(manager.nvme_file_bytes(), want)
      << "device " << device_chunks << ", host " << host_chunks << " chunks";
  std::mt19937 rng{uint32_t(seed)};
  std::vector<int> held;
  if (use_trace) manager.start_trace();
  for (int step = 0; step < 400; ++step) {
    if (use_trace && step == 100) manager.use_trace(manager.stop_trace(), 3);
    const int op = int(rng() % 10);
    if (op < 6 && held.size() + 1 < device_chunks) {
      const size_t i = rng() % tensors.size();
      const int c = manager.chunk_of(tensors[i]);
      // Some chunks in the host tier, as the optimizer holds them (a chunk keeps its tier while
      // held, so it is the chunk's).
      const bool host = host_chunks > 1 && c % 3 == 0;
      manager.access(c, AccessMode::ReadWrite, host ? Tier::Host : Tier::Device);
      ASSERT_EQ(tensors[i].to_vector<float>(), shadow[i]) << "step " << step;
      const float v = float(step) + 0.25f;
      tensors[i].fill(v);
      shadow[i].assign(shadow[i].size(), v);
      held.push_back(c);
    } else if (!held.empty()) {
      const size_t k = rng() % held.size();
      manager.release(held[k]);
      held.erase(held.begin() + int64_t(k));
    }
    manager.check_accounting();
    ASSERT_LE(manager.nvme_bytes_in_use(), want) << "step " << step;
  }
  for (int c : held) manager.release(c);
  manager.wait_all();
}

TEST(NvmeBudget, TheChunksEvictionCanLeaveOnNvmeAreEnough) {
  random_writes(3, 2, false, 7);   // 8 of 9 chunks
  random_writes(3, 2, true, 13);   // with prefetch reads in flight
  random_writes(3, 4, true, 33);   // 6
  random_writes(4, 0, false, 21);  // no host tier: device victims go to NVMe; 6
  random_writes(2, 0, true, 5);    // 8
}

TEST(NvmeBudget, OneChunkLessIsRefusedBeforeAnyWrite) {
  for (size_t host : {size_t(2), size_t(0)}) {
    test::ScratchDir dir;
    const size_t need = 9 - (host > 0 ? host : 3) + 1;
    ChunkManager manager(tiers(dir.str(), 3, host, need - 1));
    auto tensors = make_tensors(3);
    for (auto& t : tensors) manager.add(t, "grad");
    const std::string count = "eviction can leave " + std::to_string(need) + " of the 9 chunks";
    const std::string smallest =
        "smallest NVMe budget that works is " + std::to_string(need * kChunk);
    test::expect_error([&] { manager.seal(); }, {count.c_str(), smallest.c_str()});
  }
  test::ScratchDir dir;  // budget 0: a slot for every chunk
  ChunkManager manager(tiers(dir.str(), 3, 2));
  auto tensors = make_tensors(3);
  for (auto& t : tensors) manager.add(t, "grad");
  manager.seal();
  EXPECT_EQ(manager.nvme_file_bytes(), 9 * kChunk);
}

}  // namespace
}  // namespace tessel::memory
