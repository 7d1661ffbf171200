// SPDX-License-Identifier: Apache-2.0
// Clean evictions: a chunk whose NVMe slot holds its bytes (written at start-up, or after the
// last ReadWrite access) and that was only read since is dropped from memory without a write,
// and reading it back gives those bytes; a ReadWrite access makes it dirty, so its next
// eviction writes it once, and later read-only round trips write nothing again. The NVMe bytes
// written are exactly the chunks written by ReadWrite accesses (as a training step's are the
// chunks its update writes).
#include <gtest/gtest.h>

#include "memory_test_util.h"
#include "tessel/memory/chunk_manager.h"

namespace tessel::memory {
namespace {

constexpr size_t kChunk = 8192;

MemoryConfig tiers(const std::string& dir) {
  MemoryConfig config;
  config.chunk_bytes = kChunk;
  config.device_budget = 2 * kChunk;
  config.host_budget = 1 * kChunk;
  config.nvme_dir = dir;
  config.io_block_bytes = 4096;
  config.io_depth = 4;
  return config;
}

// A pass that only reads, in the device tier (a forward, or a backward over the parameters).
void read_pass(ChunkManager& m, bool reverse) {
  const int n = m.num_chunks();
  for (int k = 0; k < n; ++k) {
    const int id = reverse ? n - 1 - k : k;
    m.access(id, AccessMode::Read);
    m.release(id, reverse ? ChunkState::HoldAfterBackward : ChunkState::HoldAfterForward);
    m.check_accounting();
  }
}

TEST(CleanEviction, OnlyChunksWrittenSinceTheirLastNvmeCopyAreWritten) {
  test::ScratchDir dir;
  ChunkManager m(tiers(dir.str()));
  Generator gen(7);
  std::vector<Tensor> tensors;
  std::vector<std::vector<float>> shadow;
  for (int i = 0; i < 17; ++i) {  // 1716 bytes each, four per chunk: 5 chunks
    tensors.push_back(randn({33, 13}, DType::F32, &gen));
    m.add(tensors.back(), "param");
    shadow.push_back(tensors.back().to_vector<float>());
  }
  m.seal();
  const int n = m.num_chunks();
  ASSERT_EQ(n, 5);
  // Device 2, host 1: the last two chunks start on NVMe, written once each by seal().
  EXPECT_EQ(m.stats().nvme_writes, 2);
  EXPECT_EQ(m.chunk(3).nvme_writes, 1);
  EXPECT_EQ(m.chunk(4).nvme_writes, 1);
  auto check_contents = [&](const char* when) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int id = m.chunk_of(tensors[i]);
      m.access(id, AccessMode::Read, Tier::Host);
      EXPECT_EQ(tensors[i].to_vector<float>(), shadow[i]) << tensors[i].name() << " " << when;
      m.release(id);
    }
  };

  // Start-up's NVMe copies are valid: reading the chunks through the device tier and evicting
  // them again writes only the three chunks that never had an NVMe copy.
  m.reset_stats();
  read_pass(m, false);
  read_pass(m, true);
  for (int id = 0; id < n; ++id) m.move(id, Tier::Nvme);
  EXPECT_EQ(m.stats().nvme_writes, 3);
  EXPECT_EQ(m.stats().bytes_written, 3 * kChunk);
  for (int id = 0; id < n; ++id) EXPECT_EQ(m.chunk(id).nvme_writes, 1) << "chunk " << id;
  check_contents("after start-up");

  // Read-only passes over chunks with valid NVMe copies: every eviction is clean.
  for (int id = 0; id < n; ++id) m.move(id, Tier::Nvme);
  m.reset_stats();
  for (int round = 0; round < 3; ++round) {
    read_pass(m, false);
    read_pass(m, true);
  }
  for (int id = 0; id < n; ++id) m.move(id, Tier::Nvme);
  EXPECT_EQ(m.stats().nvme_writes, 0);
  EXPECT_EQ(m.stats().bytes_written, 0u);
  EXPECT_GT(m.stats().nvme_reads, 2 * n);
  EXPECT_GT(m.stats().clean_evictions, 2 * n);

  // An update writes chunks 1 and 3 in the host tier; each is written to NVMe once, however
  // often it is evicted afterwards, and the others not at all.
  m.reset_stats();
  for (int id : {1, 3}) {
    m.access(id, AccessMode::ReadWrite, Tier::Host);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (m.chunk_of(tensors[i]) != id) continue;
      const float v = 0.25f * float(i + 1);
      tensors[i].fill(v);
      shadow[i].assign(shadow[i].size(), v);
    }
    m.release(id);
  }
  for (int round = 0; round < 3; ++round) {
    read_pass(m, false);
    read_pass(m, true);
  }
  for (int id = 0; id < n; ++id) m.move(id, Tier::Nvme);
  EXPECT_EQ(m.stats().nvme_writes, 2);
  EXPECT_EQ(m.stats().bytes_written, 2 * kChunk);
  EXPECT_EQ(m.chunk(1).nvme_writes, 2);  // start-up's pass, then the update's
  EXPECT_EQ(m.chunk(3).nvme_writes, 2);  // seal(), then the update's
  EXPECT_EQ(m.chunk(0).nvme_writes, 1);
  // The copies on NVMe are the updated ones.
  check_contents("after the update");
  m.check_accounting();
}

TEST(CleanEviction, TiesGoToTheCleanChunk) {
  for (const bool traced : {false, true}) {
    SCOPED_TRACE(traced ? "Belady with a trace" : "LRU");
    test::ScratchDir dir;
    MemoryConfig config = tiers(dir.str());
    config.device_budget = kChunk;
    config.host_budget = 2 * kChunk;
    ChunkManager m(config);
    Generator gen(13);
    std::vector<Tensor> tensors;
    std::vector<std::vector<float>> shadow;
    for (int i = 0; i < 4; ++i) {  // one chunk each
      tensors.push_back(randn({int64_t(kChunk / sizeof(float))}, DType::F32, &gen));
      m.add(tensors.back(), "param");
      shadow.push_back(tensors.back().to_vector<float>());
    }
    m.seal();
    ASSERT_EQ(m.num_chunks(), 4);
    ASSERT_EQ(m.chunk(0).tier, Tier::Device);
    ASSERT_EQ(m.chunk(1).tier, Tier::Host);
    ASSERT_EQ(m.chunk(2).tier, Tier::Host);
    ASSERT_EQ(m.chunk(3).tier, Tier::Nvme);
    // Chunk 2 gets an NVMe copy and comes back to the host tier without an access: chunks 1
    // (dirty, never on NVMe) and 2 (clean) are equal for LRU (neither used) and for MIN (the
    // trace uses neither).
    m.move(2, Tier::Nvme);
    m.prefetch(2, Tier::Host);
    m.wait_all();
    ASSERT_EQ(m.chunk(2).tier, Tier::Host);
    if (traced) m.use_trace(AccessTrace{{0, 3}, {}, 1}, 0);
    m.reset_stats();
    // Chunk 3 comes into the device tier: chunk 0 goes down to the host tier, which must send
    // one of 1 and 2 to NVMe. The lowest id would write chunk 1; the clean chunk 2 writes nothing.
    m.access(3, AccessMode::Read);
    m.release(3);
    m.check_accounting();
    EXPECT_EQ(m.stats().nvme_evictions, 1);
    EXPECT_EQ(m.stats().clean_evictions, 1);
    EXPECT_EQ(m.stats().nvme_writes, 0);
    EXPECT_EQ(m.chunk(1).tier, Tier::Host);
    EXPECT_EQ(m.chunk(2).tier, Tier::Nvme);
    EXPECT_EQ(m.chunk(0).tier, Tier::Host);
    for (int id = 0; id < 4; ++id) {
      m.access(id, AccessMode::Read, Tier::Host);
      EXPECT_EQ(tensors[size_t(id)].to_vector<float>(), shadow[size_t(id)]) << "chunk " << id;
      m.release(id);
      m.check_accounting();
    }
  }
}

}  // namespace
}  // namespace tessel::memory
