// SPDX-License-Identifier: Apache-2.0
// The traced policy: with one step's access sequence recorded, eviction by next use (Belady's
// MIN) reads from NVMe exactly as often as the offline optimum, found here by exhaustive search
// over every cache state; conservative prefetch keeps that count and issues every read ahead
// of its access.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <random>

#include "common/error_text.h"
#include "memory_test_util.h"
#include "tessel/memory/chunk_manager.h"

namespace tessel::memory {
namespace {

constexpr size_t kChunk = 8192;

// The fewest fetches any replacement schedule needs to serve `seq` with `capacity` slots,
// starting from the chunks in `initial` (a bit mask): dynamic programming over cache sets.
int64_t optimal_fetches(const std::vector<int>& seq, int num_chunks, int capacity,
                        uint32_t initial) {
  const int64_t inf = INT64_MAX / 2;
  std::vector<int64_t> cost(size_t(1) << num_chunks, inf), next(cost.size());
  cost[initial] = 0;
  for (int x : seq) {
    std::fill(next.begin(), next.end(), inf);
    uint32_t bit = 1u << x;
    for (uint32_t mask = 0; mask < cost.size(); ++mask) {
      if (cost[mask] == inf) continue;
      if (mask & bit) {
        next[mask] = std::min(next[mask], cost[mask]);
      } else if (std::popcount(mask) < capacity) {
        next[mask | bit] = std::min(next[mask | bit], cost[mask] + 1);
      } else {
        for (int y = 0; y < num_chunks; ++y) {
          if (!(mask & (1u << y))) continue;
          uint32_t m = (mask & ~(1u << y)) | bit;
          next[m] = std::min(next[m], cost[mask] + 1);
        }
      }
    }
    std::swap(cost, next);
  }
  return *std::min_element(cost.begin(), cost.end());
}

struct Fixture {
  test::ScratchDir dir;
  std::unique_ptr<ChunkManager> manager;
  std::vector<Tensor> tensors;

  Fixture(int chunks, int device_chunks) {
    MemoryConfig config;
    config.chunk_bytes = kChunk;
    config.device_budget = size_t(device_chunks) * kChunk;
    config.host_budget = 0;  // every miss is an NVMe read
    config.nvme_dir = dir.str();
    config.io_block_bytes = 4096;
    config.io_depth = 8;
    manager = std::make_unique<ChunkManager>(config);
    Generator gen{uint64_t(chunks)};
    for (int i = 0; i < chunks; ++i) {
      tensors.push_back(randn({2000}, DType::F32, &gen));  // one tensor per chunk
      manager->add(tensors.back(), "param");
    }
    manager->seal();
  }
  void run(const std::vector<int>& seq, AccessMode mode = AccessMode::Read) {
    for (int c : seq) {
      manager->access(c, mode);
      EXPECT_EQ(manager->chunk(c).tier, Tier::Device);
      manager->release(c, ChunkState::HoldAfterForward);
      manager->check_accounting();
    }
  }
  uint32_t device_mask() const {
    uint32_t mask = 0;
    for (int c = 0; c < manager->num_chunks(); ++c) {
      if (manager->chunk(c).tier == Tier::Device) mask |= 1u << c;
    }
    return mask;
  }
};

std::vector<int> random_sequence(int length, int chunks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> seq;
  while (int(seq.size()) < length) {
    int c = int(rng() % uint32_t(chunks));
    if (seq.empty() || seq.back() != c) seq.push_back(c);
  }
  return seq;
}

TEST(Policy, BeladyReadsEqualTheOptimumWithAndWithoutPrefetch) {
  const int chunks = 7, capacity = 3;
  for (uint32_t seed : {1u, 7u, 13u}) {
    std::vector<int> seq = random_sequence(40, chunks, seed);
    for (int distance : {0, 1, 4, 40}) {
      Fixture f(chunks, capacity);
      f.manager->start_trace();
      f.run(seq);  // the recorded step, under LRU
      AccessTrace trace = f.manager->stop_trace();
      ASSERT_EQ(trace.accesses, seq);
      ASSERT_EQ(trace.max_held, 1);
      const uint32_t start = f.device_mask();
      int64_t optimum = optimal_fetches(seq, chunks, capacity, start);
      f.manager->reset_stats();
      f.manager->use_trace(trace, distance);
      f.run(seq);
      const MemoryStats& s = f.manager->stats();
      SCOPED_TRACE("seed " + std::to_string(seed) + " distance " + std::to_string(distance));
      // Prefetch runs on into the next step: its reads are not this step's.
      EXPECT_EQ(s.nvme_reads - f.manager->prefetched_unused(), optimum);
      EXPECT_EQ(s.nvme_writes, 0);  // read-only accesses: evicting a clean chunk writes nothing
      if (distance == 0) {
        EXPECT_EQ(f.manager->prefetched_unused(), 0);
        EXPECT_EQ(s.demand_reads, s.nvme_reads);
      } else {
        EXPECT_EQ(s.demand_reads, 0);  // every read was issued ahead of its access
        EXPECT_EQ(s.prefetch_reads, s.nvme_reads);
        // The next step: its first reads were issued during this one, none waits for its own.
        f.run(seq);
        std::vector<int> two_steps = seq;
        two_steps.insert(two_steps.end(), seq.begin(), seq.end());
        EXPECT_EQ(s.nvme_reads - f.manager->prefetched_unused(),
                  optimal_fetches(two_steps, chunks, capacity, start));
        EXPECT_EQ(s.demand_reads, 0);
      }
    }
  }
}

TEST(Policy, UnscheduledAccessesLeaveTheScheduleWhereItWas) {
  // A checkpoint between two steps touches every chunk out of the trace's order; the next step
  // still finds each of its reads issued ahead of it. Fed to the policy as the step's own, the
  // first of those accesses (not the trace's first) would lose the trace for good.
  const int chunks = 7, capacity = 3;
  const std::vector<int> seq = random_sequence(40, chunks, 5);
  Fixture f(chunks, capacity);
  f.manager->start_trace();
  f.run(seq);
  f.manager->use_trace(f.manager->stop_trace(), 4);
  f.run(seq);
  std::vector<int> order;
  for (int c = 0; c < chunks; ++c)
    if (c != seq.front()) order.push_back(c);
  order.push_back(seq.front());
  f.manager->begin_unscheduled();
  f.run(order);
  f.manager->end_unscheduled();
  f.manager->reset_stats();
  f.run(seq);
  EXPECT_GT(f.manager->stats().nvme_reads, 0);
  EXPECT_EQ(f.manager->stats().demand_reads, 0);
}

TEST(Policy, AStepThatLeftTheTraceFindsItAgainWhenTheNextStepBegins) {
  // An access the trace does not have loses the position (LRU meanwhile); the next step starts
  // with the trace's first access, and from there eviction must follow the trace again.
  AccessPolicy p;
  p.resize(7);
  p.use_trace({0, 1, 2, 3, 4, 5});
  for (int c : {0, 1, 6}) p.on_access(c);  // 6: not in the trace
  EXPECT_FALSE(p.has_trace());
  for (int c : {2, 3, 4, 5}) p.on_access(c);  // the rest of the step, off the trace
  EXPECT_FALSE(p.has_trace());
  p.on_access(0);  // the next step
  ASSERT_TRUE(p.has_trace());
  EXPECT_EQ(p.cursor(), 1u);
  p.on_access(1);
  EXPECT_EQ(p.cursor(), 2u);
  // Belady again: of 0 (next use at 6) and 3 (at 3) the victim is 0; LRU would take 3, used
  // before 0 came round.
  const std::vector<int> candidates = {0, 3};
  EXPECT_EQ(p.choose_victim(candidates), 0);
}

TEST(Policy, DirtyChunksKeepTheOptimumAndTheirContents) {
  // Every access writes, so every eviction writes to NVMe and prefetch must not wait for it.
  const int chunks = 7, capacity = 3;
  std::vector<int> seq = random_sequence(40, chunks, 5);
  Fixture f(chunks, capacity);
  f.manager->start_trace();
  f.run(seq, AccessMode::ReadWrite);
  AccessTrace trace = f.manager->stop_trace();
  int64_t optimum = optimal_fetches(seq, chunks, capacity, f.device_mask());
  f.manager->reset_stats();
  f.manager->use_trace(trace, 4);
  std::vector<float> last(chunks, -1.0f);
  for (size_t i = 0; i < seq.size(); ++i) {
    int c = seq[i];
    f.manager->access(c);
    Tensor& t = f.tensors[size_t(c)];
    if (last[size_t(c)] >= 0) {
      EXPECT_EQ(t.to_vector<float>()[1999], last[size_t(c)]);
    }
    t.fill(double(i));
    last[size_t(c)] = float(i);
    f.manager->release(c, ChunkState::HoldAfterBackward);
    f.manager->check_accounting();
  }
  EXPECT_EQ(f.manager->stats().nvme_reads - f.manager->prefetched_unused(), optimum);
  EXPECT_GT(f.manager->stats().nvme_writes, 0);
}

TEST(Policy, LruWithoutATraceReadsMoreThanBelady) {
  // A loop one chunk larger than the device tier: LRU misses every access, MIN one in three.
  std::vector<int> seq;
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 4; ++c) seq.push_back(c);
  }
  Fixture lru(4, 3);
  lru.run(seq);
  lru.manager->reset_stats();
  lru.run(seq);
  Fixture min(4, 3);
  min.manager->start_trace();
  min.run(seq);
  min.manager->use_trace(min.manager->stop_trace(), 0);
  uint32_t start = min.device_mask();
  min.manager->reset_stats();
  min.run(seq);
  EXPECT_EQ(lru.manager->stats().nvme_reads, 24);
  EXPECT_EQ(min.manager->stats().nvme_reads, optimal_fetches(seq, 4, 3, start));
  EXPECT_LT(min.manager->stats().nvme_reads, 12);
}

TEST(Policy, AWorkingSetLargerThanTheDeviceIsRefusedBeforeTheStep) {
  Fixture big(5, 4);
  big.manager->start_trace();
  for (int c : {0, 1, 2}) big.manager->access(c);  // a step that holds three chunks at once
  for (int c : {2, 1, 0}) big.manager->release(c);
  big.manager->access(3);
  big.manager->release(3);
  AccessTrace trace = big.manager->stop_trace();
  EXPECT_EQ(trace.max_held, 3);
  Fixture small(5, 2);
  test::expect_error(
      [&] { small.manager->use_trace(trace, 2); },
      {"memory.device_budget of 16384 bytes holds 2 chunks", "holds 3 chunks for compute at once",
       "smallest device budget that works is 24576 bytes"});
  Fixture enough(5, 3);
  enough.manager->use_trace(trace, 2);
  enough.run({0, 1, 2, 3});
}

TEST(Policy, TheTraceKeepsEachAccessTierAndCountsOnlyDeviceHolds) {
  // Four chunks on NVMe; the step reads chunk 0 in the device tier and, holding it, chunks 1-3
  // in the host tier (as the CPU optimizer does).
  test::ScratchDir dir;
  MemoryConfig config;
  config.chunk_bytes = kChunk;
  config.device_budget = kChunk;
  config.host_budget = 3 * kChunk;
  config.nvme_dir = dir.str();
  config.io_block_bytes = 4096;
  ChunkManager m(config);
  Generator gen{5};
  std::vector<Tensor> t;
  for (int i = 0; i < 6; ++i) {
    t.push_back(randn({2000}, DType::F32, &gen));
    m.add(t.back(), "param");
  }
  m.seal();
  const auto step = [&] {
    m.access(0, AccessMode::Read, Tier::Device);
    for (int c : {1, 2, 3}) m.access(c, AccessMode::Read, Tier::Host);
    for (int c : {3, 2, 1, 0}) m.release(c);
    for (int c : {4, 5}) {
      m.access(c, AccessMode::Read, Tier::Device);
      m.release(c);
    }
    m.check_accounting();
  };
  m.start_trace();
  step();
  AccessTrace trace = m.stop_trace();
  EXPECT_EQ(trace.accesses, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(trace.tiers, (std::vector<Tier>{Tier::Device, Tier::Host, Tier::Host, Tier::Host,
                                            Tier::Device, Tier::Device}));
  EXPECT_EQ(trace.max_held, 1);  // four held at once, one of them in the device tier
  m.use_trace(trace, 8);
  // Steps under the trace, host-tier accesses included, keep the accounting.
  for (int i = 0; i < 3; ++i) step();
}

TEST(Policy, ManyChunkReadsInFlightAtOnce) {
  Fixture f(12, 12);
  std::vector<std::vector<unsigned char>> expect;
  for (auto& t : f.tensors) expect.push_back(test::bytes_of(t));
  for (int c = 0; c < 12; ++c) f.manager->move(c, Tier::Nvme);
  // Twelve reads of two requests each against a queue of depth 8: submission waits for room.
  for (int c = 0; c < 12; ++c) f.manager->prefetch(c);
  f.manager->check_accounting();
  for (int c = 11; c >= 0; --c) {
    f.manager->access(c, AccessMode::Read);
    EXPECT_EQ(test::bytes_of(f.tensors[size_t(c)]), expect[size_t(c)]) << "chunk " << c;
    f.manager->release(c);
  }
  EXPECT_EQ(f.manager->stats().prefetch_reads, 12);
  EXPECT_EQ(f.manager->stats().demand_reads, 0);
  f.manager->check_accounting();
}

}  // namespace
}  // namespace tessel::memory
