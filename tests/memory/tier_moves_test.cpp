// SPDX-License-Identifier: Apache-2.0
// Moves between the memory tiers of a CPU-only machine (both host memory): a chunk changes pools
// without a copy (its bytes stay where they are) and without fresh pages, every pool within its
// budget; a pool taking over a block while it keeps one for reuse hands that one to the other
// pool in exchange instead of unmapping it (so the next allocation there faults nothing in).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "tessel/memory/chunk_manager.h"

namespace tessel::memory {
namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

TEST(TierMoves, AChunkChangesPoolsWithoutACopyOrFreshPages) {
  constexpr size_t kChunk = size_t(1) << 20;  // 256 pages: a fresh block would fault them all in
  MemoryConfig config;
  config.chunk_bytes = kChunk;
  config.device_budget = 3 * kChunk;
  config.host_budget = 5 * kChunk;
  ChunkManager manager(config);
  std::vector<Tensor> tensors;
  for (int i = 0; i < 5; ++i) {  // one tensor a chunk
    tensors.push_back(empty({int64_t(kChunk / sizeof(float)) - 64}, DType::F32));
    tensors.back().set_name("t" + std::to_string(i));
    manager.add(tensors.back(), "param");
  }
  manager.seal();
  for (int i = 0; i < 5; ++i) {
    const int c = manager.chunk_of(tensors[size_t(i)]);
    manager.access(c, AccessMode::ReadWrite, Tier::Host);
    tensors[size_t(i)].fill(double(i) - 0.5);
    manager.release(c);
  }
  // Warm up: every block of both pools has been touched once.
  const auto cycle = [&](int rounds) {
    for (int r = 0; r < rounds; ++r) {
      for (int i = 0; i < 5; ++i) {
        const int c = manager.chunk_of(tensors[size_t(i)]);
        const Tier to = (r + i) % 2 == 0 ? Tier::Device : Tier::Host;
        const void* before = tensors[size_t(i)].data_ptr();
        manager.move(c, to);
        ASSERT_EQ(manager.chunk(c).tier, to);
        ASSERT_EQ(tensors[size_t(i)].data_ptr(), before) << "chunk " << c << " was copied";
        manager.check_accounting();
        ASSERT_LE(manager.pool(Tier::Device).bytes_held(), config.device_budget);
        ASSERT_LE(manager.pool(Tier::Host).bytes_held(), config.host_budget);
      }
    }
  };
  cycle(2);
  const long faults = minor_faults();
  cycle(20);  // 100 moves
  EXPECT_LT(minor_faults() - faults, 200) << "moves between the memory tiers faulted pages in";
  EXPECT_GT(manager.stats().host_to_device, 0);
  EXPECT_GT(manager.stats().device_to_host, 0);
  for (int i = 0; i < 5; ++i) {
    const int c = manager.chunk_of(tensors[size_t(i)]);
    manager.access(c, AccessMode::Read);
    const std::vector<float> v = tensors[size_t(i)].to_vector<float>();
    EXPECT_EQ(v.front(), float(i) - 0.5f);
    EXPECT_EQ(v.back(), float(i) - 0.5f);
    manager.release(c);
  }
}

TEST(TierMoves, APoolOverBudgetExchangesTheBlockItKeeps) {
  constexpr size_t kBlock = size_t(64) << 10;
  BudgetedPool a("a", 2 * kBlock), b("b", kBlock);
  void* kept = b.allocate(kBlock);
  b.deallocate(kept, kBlock);  // b keeps it for reuse: b holds its whole budget
  void* a1 = a.allocate(kBlock);
  void* a2 = a.allocate(kBlock);
  a.deallocate(a1, kBlock);
  EXPECT_EQ(b.adopt(a, a1, kBlock), a1);
  EXPECT_EQ(b.bytes_in_use(), kBlock);
  EXPECT_EQ(b.bytes_held(), kBlock);  // within its budget: its kept block went to a
  EXPECT_EQ(a.bytes_in_use(), kBlock);
  EXPECT_EQ(a.bytes_held(), 2 * kBlock);
  EXPECT_EQ(a.allocate(kBlock), kept);  // reused, not a fresh mapping
  // A block the other pool does not keep cannot be taken over; nor one past the budget.
  EXPECT_THROW(b.adopt(a, a2, kBlock), Error);
  a.deallocate(a2, kBlock);
  EXPECT_THROW(b.adopt(a, a2, kBlock), Error);
  b.deallocate(a1, kBlock);
  a.deallocate(kept, kBlock);
}

}  // namespace
}  // namespace tessel::memory
