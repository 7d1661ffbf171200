// SPDX-License-Identifier: Apache-2.0
// The caching allocator's bookkeeping over real, budgeted host memory: reuse, splitting and
// coalescing, per-stream pools, statistics, out of memory (the same checks run over cudaMalloc in
// the GPU tests), and what only a budget shows: cached segments go back to the source before a
// request is refused.
#include "tessel/tensor/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "common/caching_allocator_checks.h"
#include "tessel/tensor/memory_source.h"

namespace tessel {
namespace {

using test::kKiB;
using test::kMiB;

struct Budgeted {
  BudgetedHostSource* source;
  CachingAllocator allocator;
  explicit Budgeted(size_t budget) : Budgeted(std::make_unique<BudgetedHostSource>(budget)) {}

 private:
  explicit Budgeted(std::unique_ptr<BudgetedHostSource> s)
      : source(s.get()), allocator(std::move(s)) {}
};

TEST(CachingAllocator, RoundsRequests) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB + 512), 12 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(33 * kMiB), 34 * kMiB);
}

TEST(CachingAllocator, ReusesFreedBlocks) {
  Budgeted b(256 * kMiB);
  test::check_reuse(b.allocator);
  EXPECT_EQ(b.source->acquires(), 1);
}

TEST(CachingAllocator, SplitsAndCoalesces) {
  Budgeted b(256 * kMiB);
  test::check_split_and_coalesce(b.allocator);
  EXPECT_EQ(b.source->used(), 0u);
}

TEST(CachingAllocator, SplitsLargeBlocks) {
  Budgeted b(256 * kMiB);
  test::check_large_split(b.allocator);
}

TEST(CachingAllocator, KeepsStreamsApart) {
  Budgeted b(256 * kMiB);
  test::check_streams_apart(b.allocator);
}

TEST(CachingAllocator, CountsInUsePeakAndReserved) {
  Budgeted b(256 * kMiB);
  test::check_stats(b.allocator);
}

TEST(CachingAllocator, ReportsOutOfMemory) {
  Budgeted b(64 * kMiB);
  test::check_out_of_memory(b.allocator, 63 * kMiB);
}

TEST(CachingAllocator, RefusesForeignPointers) {
  Budgeted b(64 * kMiB);
  test::check_foreign_pointer(b.allocator);
}

// Before refusing a request, the allocator returns its cached free segments to the source.
TEST(CachingAllocator, ReleasesTheCacheBeforeRefusing) {
  Budgeted b(64 * kMiB);
  void* p = b.allocator.allocate(40 * kMiB);
  b.allocator.deallocate(p, 40 * kMiB);
  EXPECT_EQ(b.source->used(), 40 * kMiB);  // cached
  void* q = b.allocator.allocate(50 * kMiB);
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(b.allocator.stats().source_releases, 1);
  EXPECT_EQ(b.source->used(), 50 * kMiB);
  b.allocator.deallocate(q, 50 * kMiB);
}

// A medium request whose 20 MiB segment does not fit still gets a segment of its own size.
TEST(CachingAllocator, FallsBackToAnExactSegment) {
  Budgeted b(8 * kMiB);
  void* p = b.allocator.allocate(5 * kMiB);
  EXPECT_EQ(b.allocator.stats().reserved, 5 * kMiB);
  b.allocator.deallocate(p, 5 * kMiB);
}

// The memory is real: blocks hold what is written to them, and neighbours do not overlap.
TEST(CachingAllocator, BlocksHoldTheirBytes) {
  Budgeted b(64 * kMiB);
  char* x = static_cast<char*>(b.allocator.allocate(3000));
  char* y = static_cast<char*>(b.allocator.allocate(3000));
  std::memset(x, 1, 3000);
  std::memset(y, 2, 3000);
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(x[i], 1);
  b.allocator.deallocate(x, 3000);
  b.allocator.deallocate(y, 3000);
}

}  // namespace
}  // namespace tessel
