// SPDX-License-Identifier: Apache-2.0
// The host allocator's cache of large blocks: a freed block serves the next request of its size
// without a new mapping, its contents stay readable and writable, what is mapped never passes the
// most ever in use by more than the documented 1/8 however the sizes vary, and release_cached()
// unmaps every cached block.
#include "tessel/tensor/mapped_block_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace tessel {
namespace {

TEST(MappedBlockCache, ReusesAFreedBlockOfTheSameSize) {
  MappedBlockCache cache;
  void* a = cache.take((3 << 20) + 7);
  std::memset(a, 1, (3 << 20) + 7);
  cache.give(a);
  const int64_t maps = cache.maps();
  void* b = cache.take((3 << 20) + 7);
  EXPECT_EQ(a, b);
  EXPECT_EQ(cache.maps(), maps) << "a cached block of the same size needs no mapping";
  std::memset(b, 2, (3 << 20) + 7);
  cache.give(b);
  EXPECT_GT(cache.cached_bytes(), size_t(3 << 20));
  cache.release_cached();
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(cache.mapped_bytes(), 0u);
}

TEST(MappedBlockCache, MappedBytesStayWithinTheHighWaterMark) {
  MappedBlockCache cache;
  size_t live = 0, high = 0;
  std::vector<std::pair<void*, size_t>> held;
  // Sizes that never repeat exactly: every miss must reuse cached pages instead of mapping more.
  for (int round = 0; round < 40; ++round) {
    const size_t n = (size_t(1) << 20) * size_t(1 + (round * 7) % 13) + size_t(round * 4099);
    void* p = cache.take(n);
    std::memset(p, round, n);
    held.emplace_back(p, n);
    live += n;
    high = std::max(high, live);
    if (held.size() > 3) {
      cache.give(held.front().first);
      live -= held.front().second;
      held.erase(held.begin());
    }
    // A block served within 1/16 of its size and page rounding raise the mark the cache's 1/8
    // headroom is measured from: (17/16) x (9/8) < 5/4.
    EXPECT_LE(cache.mapped_bytes(), high + high / 4 + 8 * 4096) << "round " << round;
  }
  for (auto& [p, n] : held) cache.give(p);
}

}  // namespace
}  // namespace tessel
