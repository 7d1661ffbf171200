// SPDX-License-Identifier: Apache-2.0
// Tiers: bitwise round trips through device, host and NVMe; budgets never exceeded under random
// access sequences (accounting checked after every operation, contents against a shadow copy);
// one clear error for a bad nvme_dir, a full disk and budgets too small, naming what would work.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include "common/error_text.h"
#include "memory_test_util.h"
#include "tessel/memory/chunk_manager.h"

namespace tessel::memory {
namespace {

constexpr size_t kChunk = 8192;

MemoryConfig tiers(const std::string& dir, size_t device_chunks, size_t host_chunks) {
  MemoryConfig config;
  config.chunk_bytes = kChunk;
  config.device_budget = device_chunks * kChunk;
  config.host_budget = host_chunks * kChunk;
  config.nvme_dir = dir;
  config.io_block_bytes = 4096;  // two requests per chunk, so chunks are split across requests
  config.io_depth = 4;
  return config;
}

// n tensors of 33 * 13 f32 values (1716 bytes): several per chunk, random contents.
std::vector<Tensor> make_tensors(int n, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(randn({33, 13}, DType::F32, &gen));
    out.back().set_name("w" + std::to_string(i));
  }
  return out;
}

TEST(Tiers, BitwiseRoundTripThroughEveryTier) {
  test::ScratchDir dir;
  ChunkManager manager(tiers(dir.str(), 2, 2));
  auto tensors = make_tensors(7, 13);
  std::vector<std::vector<unsigned char>> expect;
  for (auto& t : tensors) {
    manager.add(t, "param");
    expect.push_back(test::bytes_of(t));
  }
  manager.seal();
  ASSERT_EQ(manager.num_chunks(), 2);  // 4 tensors of 1728 aligned bytes per 8 KiB chunk
  auto check_all = [&](const char* where) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      int c = manager.chunk_of(tensors[i]);
      manager.access(c, AccessMode::Read);
      EXPECT_EQ(test::bytes_of(tensors[i]), expect[i]) << tensors[i].name() << " after " << where;
      manager.release(c);
      manager.check_accounting();
    }
  };
  const std::vector<Tier> path = {Tier::Host, Tier::Nvme,   Tier::Device, Tier::Nvme,
                                  Tier::Host, Tier::Device, Tier::Nvme};
  for (Tier tier : path) {
    for (int c = 0; c < manager.num_chunks(); ++c) {
      manager.move(c, tier);
      EXPECT_EQ(manager.chunk(c).tier, tier);
      manager.check_accounting();
    }
    if (tier == Tier::Nvme) {
      EXPECT_EQ(manager.pool(Tier::Device).bytes_in_use(), 0u);
      EXPECT_EQ(manager.pool(Tier::Host).bytes_in_use(), 0u);
    }
    // Reads straight from NVMe into the device tier, then everything back where it was.
    check_all(tier_name(tier));
  }
  // Contents written while on the device go to NVMe and come back.
  int c = manager.chunk_of(tensors[1]);
  manager.access(c);
  tensors[1].fill(-3.25);
  manager.release(c);
  manager.move(c, Tier::Nvme);
  manager.move(c, Tier::Host);
  EXPECT_EQ(tensors[1].to_vector<float>(), std::vector<float>(33 * 13, -3.25f));
  EXPECT_GT(manager.stats().nvme_writes, 0);
  EXPECT_GT(manager.stats().nvme_reads, 0);
}

// Random accesses over more chunks than memory holds: the budgets hold at every step, and
// every tensor reads back what was last written to it.
void random_accesses(bool use_trace, uint64_t seed) {
  test::ScratchDir dir;
  ChunkManager manager(tiers(dir.str(), 3, 2));
  auto tensors = make_tensors(33, seed);  // 9 chunks
  std::vector<std::vector<float>> shadow;
  for (auto& t : tensors) {
    manager.add(t, "param");
    shadow.push_back(t.to_vector<float>());
  }
  manager.seal();
  std::mt19937 rng{uint32_t(seed)};
  std::vector<int> held;  // chunks held for compute, at most 2 so one device slot stays free
  if (use_trace) manager.start_trace();
  for (int step = 0; step < 400; ++step) {
    if (use_trace && step == 100) {
      auto trace = manager.stop_trace();
      manager.use_trace(trace, 3);  // a stale trace: the policy must still keep every rule
    }
    int op = int(rng() % 10);
    if (op < 6 && held.size() < 2) {
      size_t i = rng() % tensors.size();
      int c = manager.chunk_of(tensors[i]);
      bool write = rng() % 2 == 0;
      manager.access(c, write ? AccessMode::ReadWrite : AccessMode::Read);
      ASSERT_EQ(tensors[i].to_vector<float>(), shadow[i]) << "step " << step;
      if (write) {
        float v = float(step) + 0.5f;
        tensors[i].fill(v);
        shadow[i].assign(shadow[i].size(), v);
      }
      held.push_back(c);
    } else if (!held.empty()) {
      const ChunkState after[] = {ChunkState::Hold, ChunkState::HoldAfterForward,
                                  ChunkState::HoldAfterBackward};
      manager.release(held.back(), after[rng() % 3]);
      held.pop_back();
    } else {
      manager.move(int(rng() % 9), rng() % 2 ? Tier::Nvme : Tier::Host);
    }
    manager.check_accounting();
  }
  for (int c : held) manager.release(c);
  for (size_t i = 0; i < tensors.size(); ++i) {
    int c = manager.chunk_of(tensors[i]);
    manager.access(c, AccessMode::Read);
    EXPECT_EQ(tensors[i].to_vector<float>(), shadow[i]);
    manager.release(c);
  }
  EXPECT_LE(manager.pool(Tier::Device).peak_bytes(), 3 * kChunk);
  EXPECT_LE(manager.pool(Tier::Host).peak_bytes(), 2 * kChunk);
  EXPECT_GT(manager.stats().nvme_reads, 10);
  EXPECT_GT(manager.stats().nvme_writes, 10);
}

TEST(Tiers, BudgetsHoldUnderRandomAccessLru) {
  random_accesses(false, 33);
}
TEST(Tiers, BudgetsHoldUnderRandomAccessWithTrace) {
  random_accesses(true, 77);
}

TEST(Tiers, CascadingEvictionSparesTheChunkComingIn) {
  // One chunk per tier: bringing the host chunk to the device must push the device chunk out;
  // the host holds only the chunk on its way up, so the victim goes to NVMe, and the chunk
  // coming in is copied, not sent round through NVMe.
  test::ScratchDir dir;
  ChunkManager manager(tiers(dir.str(), 1, 1));
  auto tensors = make_tensors(12, 3);  // 3 chunks: device, host, NVMe after seal
  std::vector<std::vector<unsigned char>> expect;
  for (auto& t : tensors) {
    manager.add(t, "param");
    expect.push_back(test::bytes_of(t));
  }
  manager.seal();
  ASSERT_EQ(manager.chunk(1).tier, Tier::Host);
  manager.reset_stats();
  manager.access(1);
  EXPECT_EQ(manager.chunk(0).tier, Tier::Nvme);
  EXPECT_EQ(manager.chunk(1).tier, Tier::Device);
  EXPECT_EQ(manager.stats().nvme_reads, 0);
  EXPECT_EQ(manager.stats().nvme_writes, 1);
  EXPECT_EQ(manager.stats().host_to_device, 1);
  EXPECT_EQ(test::bytes_of(tensors[4]), expect[4]);
  manager.release(1);
  manager.check_accounting();
}

// stats().io_wait_ms is the time the caller blocked on NVMe: none while every access finds its
// chunk in memory, some once an access must read its chunk back from NVMe (a demand read).
TEST(Tiers, TheCallersWaitForNvmeIsTimed) {
  test::ScratchDir dir;
  ChunkManager manager(tiers(dir.str(), 2, 2));
  auto tensors = make_tensors(7, 5);
  for (auto& t : tensors) manager.add(t, "param");
  manager.seal();
  ASSERT_EQ(manager.num_chunks(), 2);
  manager.reset_stats();
  for (int c = 0; c < 2; ++c) {
    manager.access(c);
    manager.release(c);
  }
  EXPECT_EQ(manager.stats().io_wait_ms, 0.0);
  manager.move(1, Tier::Nvme);
  manager.reset_stats();
  manager.access(1, AccessMode::Read);
  manager.release(1);
  EXPECT_EQ(manager.stats().demand_reads, 1);
  EXPECT_GT(manager.stats().io_wait_ms, 0.0);
  manager.check_accounting();
}

TEST(Tiers, BudgetsTooSmallNameWhatWouldWork) {
  auto tensors = make_tensors(12, 1);  // 3 chunks
  {
    ChunkManager manager(tiers("", 0, 8));
    for (auto& t : tensors) manager.add(t, "param");
    test::expect_error([&] { manager.seal(); }, {"memory.device_budget of 0 bytes",
                                                 "smallest device budget that works is 8192"});
  }
  {
    ChunkManager manager(tiers("", 1, 1));
    for (auto& t : tensors) manager.add(t, "param");
    test::expect_error([&] { manager.seal(); },
                       {"3 chunks", "smallest host budget that works is 16384", "nvme_dir"});
  }
  {
    // Fits at rest, but three chunks held for compute at once do not fit a two-chunk device.
    test::ScratchDir dir;
    ChunkManager manager(tiers(dir.str(), 2, 0));
    for (auto& t : tensors) manager.add(t, "param");
    manager.seal();
    manager.access(0);
    manager.access(1);
    test::expect_error([&] { manager.access(2); },
                       {"device tier", "memory.device_budget 16384", "16384 in use",
                        "2 chunks held for compute", "smallest budget that works", "24576"});
    manager.check_accounting();
    manager.release(1);
    manager.access(2);  // now chunk 1 can go to NVMe
    EXPECT_EQ(manager.chunk(1).tier, Tier::Nvme);
    manager.check_accounting();
  }
}

TEST(Tiers, BadNvmeDirIsOneClearErrorUpFront) {
  test::ScratchDir scratch;
  test::expect_error([&] { ChunkManager m(tiers(scratch.str() + "/missing", 1, 0)); },
                     {"memory.nvme_dir", "missing", "No such file or directory"});
  std::string file = scratch.str() + "/a-file";
  std::ofstream(file) << "x";
  test::expect_error([&] { ChunkManager m(tiers(file, 1, 0)); }, {"is not a directory"});
  // Unwritable: a read-only directory (root ignores permission bits, so it uses a directory
  // of sysfs, which no one can create files in).
  std::string ro = scratch.str() + "/read-only";
  ::mkdir(ro.c_str(), 0500);
  if (::geteuid() == 0) ro = "/sys/fs";
  test::expect_error([&] { ChunkManager m(tiers(ro, 1, 0)); }, {"is not writable", ro.c_str()});
  // Full: more than the disk has free is refused before any byte is written.
  NvmeTier tier(scratch.str(), kIoAlignment, 4, kIoAlignment);
  test::expect_error([&] { tier.reserve(size_t(1) << 32); },
                     {"cannot reserve 17592186044416 bytes", "bytes are free"});
  // Nothing was left behind by the probe or the refused reservation.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(scratch.str()), {}), 2);
}

TEST(Tiers, NvmeBudgetTooSmall) {
  test::ScratchDir dir;
  MemoryConfig config = tiers(dir.str(), 1, 0);
  config.nvme_budget = kChunk;
  ChunkManager manager(config);
  auto tensors = make_tensors(12, 5);
  for (auto& t : tensors) manager.add(t, "param");
  test::expect_error(
      [&] { manager.seal(); },
      {"hold 2 chunks", "smallest host budget that works is 8192", "memory.nvme_budget"});
}

}  // namespace
}  // namespace tessel::memory
