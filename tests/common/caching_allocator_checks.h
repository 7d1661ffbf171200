// SPDX-License-Identifier: Apache-2.0
// Checks of the caching allocator's bookkeeping (tensor/caching_allocator.h) that hold over any
// memory source: the CPU tests run them over budgeted host memory, the GPU tests over cudaMalloc.
// Each takes a fresh allocator.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tessel/core/error.h"
#include "tessel/tensor/caching_allocator.h"

namespace tessel::test {

inline constexpr size_t kKiB = size_t(1) << 10;
inline constexpr size_t kMiB = size_t(1) << 20;

inline char* bytes_of(void* p) {
  return static_cast<char*>(p);
}

// A freed block is handed out again for the next request of its size, without the source.
inline void check_reuse(CachingAllocator& a) {
  void* p = a.allocate(1000);
  a.deallocate(p, 1000);
  void* q = a.allocate(1000);
  EXPECT_EQ(p, q);
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.source_acquires, 1);
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.in_use, CachingAllocator::kRoundBytes * 2);  // 1000 rounds up to 1024
  EXPECT_EQ(a.bytes_in_use(), 1000u);
  a.deallocate(q, 1000);
  EXPECT_EQ(a.stats().in_use, 0u);
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

// Small requests are carved one after another from one segment; freed neighbours merge, so the
// merged block serves a request none of them could alone; a wholly free segment goes back to the
// source on empty_cache.
inline void check_split_and_coalesce(CachingAllocator& a) {
  const size_t q = 512 * kKiB;
  void* x = a.allocate(q);
  void* y = a.allocate(q);
  void* z = a.allocate(q);
  EXPECT_EQ(bytes_of(y), bytes_of(x) + q);
  EXPECT_EQ(bytes_of(z), bytes_of(y) + q);
  EXPECT_EQ(a.stats().segments, 1);
  EXPECT_EQ(a.stats().reserved, CachingAllocator::kSmallSegment);
  a.deallocate(y, q);
  a.deallocate(x, q);  // merges with y's block
  void* w = a.allocate(2 * q);
  EXPECT_EQ(w, x) << "x and y's blocks should have merged";
  EXPECT_EQ(a.stats().segments, 1);
  a.deallocate(w, 2 * q);
  a.deallocate(z, q);  // the segment is one free block again
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.largest_free, CachingAllocator::kSmallSegment);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(s.segments, 0);
  EXPECT_EQ(s.source_releases, 1);
}

// A large block is split for a smaller large request and the rest serves the next one; a segment
// with a block in use is not released by empty_cache.
inline void check_large_split(CachingAllocator& a) {
  void* big = a.allocate(30 * kMiB);
  a.deallocate(big, 30 * kMiB);
  void* p = a.allocate(12 * kMiB);
  void* r = a.allocate(12 * kMiB);
  EXPECT_EQ(p, big);
  EXPECT_EQ(bytes_of(r), bytes_of(big) + 12 * kMiB);
  EXPECT_EQ(a.stats().source_acquires, 1);
  EXPECT_EQ(a.stats().cache_hits, 2);
  a.deallocate(p, 12 * kMiB);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 30 * kMiB) << "the segment still holds r";
  a.deallocate(r, 12 * kMiB);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0u);
}

// Blocks freed on one stream are not handed to another.
inline void check_streams_apart(CachingAllocator& a) {
  void* p1 = a.allocate_on(4096, 1);
  a.deallocate(p1, 4096);
  void* p2 = a.allocate_on(4096, 2);
  EXPECT_NE(p1, p2);
  EXPECT_EQ(a.stats().source_acquires, 2) << "stream 2 must get its own segment";
  void* p1b = a.allocate_on(4096, 1);
  EXPECT_EQ(p1b, p1);
  a.deallocate(p2, 4096);
  a.deallocate(p1b, 4096);
  a.set_stream(2);
  void* p2b = a.allocate(4096);  // the allocator's current stream
  EXPECT_EQ(p2b, p2);
  a.deallocate(p2b, 4096);
}

// In use, peak and reserved through a sequence of requests.
inline void check_stats(CachingAllocator& a) {
  void* p = a.allocate(3 * kMiB);    // medium: a 20 MiB segment
  void* q = a.allocate(100 * kKiB);  // small: a 2 MiB segment
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.in_use, 3 * kMiB + 100 * kKiB);
  EXPECT_EQ(s.reserved, CachingAllocator::kMediumSegment + CachingAllocator::kSmallSegment);
  EXPECT_EQ(s.cached_free, s.reserved - s.in_use);
  EXPECT_EQ(s.segments, 2);
  a.deallocate(p, 3 * kMiB);
  s = a.stats();
  EXPECT_EQ(s.in_use, 100 * kKiB);
  EXPECT_EQ(s.peak_in_use, 3 * kMiB + 100 * kKiB);
  a.reset_peaks();
  EXPECT_EQ(a.stats().peak_in_use, 100 * kKiB);
  EXPECT_EQ(a.peak_bytes(), 100 * kKiB);
  a.deallocate(q, 100 * kKiB);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(a.stats().peak_reserved,
            CachingAllocator::kMediumSegment + CachingAllocator::kSmallSegment);
}

// A request the source cannot hold fails with an Error that names its size and the pool's state,
// and leaves the allocator usable.
inline void check_out_of_memory(CachingAllocator& a, size_t too_big) {
  void* p = a.allocate(kMiB);
  try {
    a.allocate(too_big);
    ADD_FAILURE() << "allocating " << too_big << " bytes should fail";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("out of memory on " + a.device().str()), std::string::npos) << what;
    EXPECT_NE(what.find("cannot allocate " + std::to_string(too_big) + " bytes"), std::string::npos)
        << what;
    EXPECT_NE(what.find("1.0 MiB in use"), std::string::npos) << what;
    EXPECT_NE(what.find("reserved in 1 segments"), std::string::npos) << what;
  }
  EXPECT_EQ(a.stats().out_of_memory, 1);
  EXPECT_EQ(a.stats().in_use, kMiB);
  a.deallocate(p, kMiB);
}

inline void check_foreign_pointer(CachingAllocator& a) {
  int x = 0;
  EXPECT_THROW(a.deallocate(&x, sizeof x), Error);
}

}  // namespace tessel::test
