// SPDX-License-Identifier: Apache-2.0
// Tearing a chunk manager down: the tensors keep their values in plain host memory, and the
// process's resident peak while it happens stays within the budgets and one chunk (each tier's
// block is freed as soon as its chunk is copied out), not the tiers' bytes twice over.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>

#include "tessel/memory/chunk_manager.h"

namespace tessel::memory {
namespace {

// Resets VmHWM to the current resident set (Linux: clear_refs 5); false where not allowed.
bool reset_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  return clear && (clear << "5") && clear.flush();
}

size_t status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(key + ":", 0) == 0)
      return size_t(std::stoull(line.substr(key.size() + 1))) << 10;
  ADD_FAILURE() << key << " not in /proc/self/status";
  return 0;
}

TEST(ChunkTeardown, TensorsKeepTheirValuesAndThePeakStaysWithinOneChunk) {
  // 40 MiB chunks (above glibc's largest mmap threshold, so a freed block leaves the process at
  // once), seven of them, every one in memory: 4 in the host tier, 3 in the device tier.
  constexpr size_t kChunk = size_t(40) << 20;
  constexpr int kChunks = 7;
  MemoryConfig config;
  config.chunk_bytes = kChunk;
  config.device_budget = 3 * kChunk;
  config.host_budget = 4 * kChunk;
  std::vector<Tensor> tensors;
  std::optional<ChunkManager> manager(std::in_place, config);
  const int64_t n = int64_t(kChunk / sizeof(float)) - 1024;  // one tensor per chunk
  for (int i = 0; i < kChunks; ++i) {
    tensors.push_back(empty({n}, DType::F32).set_name("t" + std::to_string(i)));
    manager->add(tensors.back(), "param");
  }
  manager->seal();
  for (int i = 0; i < kChunks; ++i) {
    const int c = manager->chunk_of(tensors[size_t(i)]);
    manager->access(c, AccessMode::ReadWrite, i < 3 ? Tier::Device : Tier::Host);
    tensors[size_t(i)].fill(double(i) + 0.25);  // every page touched: resident
    manager->release(c);
  }
  ASSERT_EQ(manager->pool(Tier::Device).bytes_in_use(), 3 * kChunk);
  ASSERT_EQ(manager->pool(Tier::Host).bytes_in_use(), 4 * kChunk);
  if (!reset_peak()) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the resident peak here";
  const size_t before = status_bytes("VmRSS");
  manager.reset();
  const size_t peak = status_bytes("VmHWM");
  EXPECT_LE(peak, before + 2 * kChunk)
      << "tearing down raised the resident peak by " << double(peak - before) / double(1 << 20)
      << " MiB over " << double(before) / double(1 << 20) << " MiB; the tiers held "
      << kChunks * (kChunk >> 20) << " MiB";
  for (int i = 0; i < kChunks; ++i) {
    const Tensor& t = tensors[size_t(i)];
    EXPECT_EQ(t.to_vector<float>().front(), float(i) + 0.25f);
    EXPECT_EQ(t.to_vector<float>().back(), float(i) + 0.25f);
  }
}

}  // namespace
}  // namespace tessel::memory
