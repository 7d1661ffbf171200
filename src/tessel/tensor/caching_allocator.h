// SPDX-License-Identifier: Apache-2.0
// CachingAllocator: a device allocator in the manner of PyTorch's CUDA caching allocator. Device
// memory is slow to obtain (cudaMalloc synchronises the device), so freed blocks are kept and
// reused instead of returned:
// - requests are rounded up to kRoundBytes; small ones (<= kSmallRequest) are carved from
//   kSmallSegment segments, medium ones from kMediumSegment segments, large ones get a segment of
//   their own size rounded up to kLargeRound;
// - a free block is found best-fit (smallest that holds the request), and split when the rest is
//   worth keeping; a freed block merges with free neighbours of its segment (coalescing), so
//   a segment whose blocks are all free is one block again;
// - every stream has its own pools: a block freed by work queued on stream S is handed out again
//   only to work on S, where stream order guarantees the earlier work is done with it;
// - when the source has no memory left, the cached free segments go back to it and the request
//   is tried once more; failing that, an Error names the request and the pools' state.
// The bookkeeping knows nothing of CUDA: it runs over any MemorySource (tests use budgeted host
// memory).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "tessel/tensor/allocator.h"
#include "tessel/tensor/memory_source.h"

namespace tessel {

// Stream handle as an integer (a cudaStream_t's value); 0 is the default stream.
using StreamId = uintptr_t;

struct CachingAllocatorStats {
  size_t in_use = 0;  // bytes of blocks handed out (rounded sizes)
  size_t peak_in_use = 0;
  size_t reserved = 0;  // bytes of segments obtained from the source
  size_t peak_reserved = 0;
  size_t cached_free = 0;   // reserved - in_use
  size_t largest_free = 0;  // largest free block over every pool
  int64_t segments = 0;
  int64_t allocations = 0;  // requests served
  int64_t cache_hits = 0;   // requests served from a cached block, without the source
  int64_t source_acquires = 0, source_releases = 0;
  int64_t out_of_memory = 0;  // requests refused
};

class CachingAllocator final : public Allocator {
 public:
  static constexpr size_t kRoundBytes = 512;
  static constexpr size_t kSmallRequest = size_t(1) << 20;    // 1 MiB
  static constexpr size_t kSmallSegment = size_t(2) << 20;    // 2 MiB
  static constexpr size_t kMediumRequest = size_t(10) << 20;  // 10 MiB
  static constexpr size_t kMediumSegment = size_t(20) << 20;  // 20 MiB
  static constexpr size_t kLargeRound = size_t(2) << 20;      // 2 MiB

  explicit CachingAllocator(std::unique_ptr<MemorySource> source);
  ~CachingAllocator() override;

  // On the allocator's current stream (set_stream; 0 until set).
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  void* allocate_on(size_t nbytes, StreamId stream);
  Device device() const override { return source_->device(); }

  void set_stream(StreamId stream);
  StreamId stream() const;

  // Returns every segment with no block in use to the source.
  void empty_cache();
  CachingAllocatorStats stats() const;
  void reset_peaks();
  // Bytes a request of nbytes occupies: rounded up to kRoundBytes (a 0-byte request takes one).
  static size_t round_size(size_t nbytes);
  // Size of the segment obtained for a request of rounded bytes.
  static size_t segment_size(size_t rounded);
  // One line: the stats, for messages and logs.
  std::string summary() const;

 private:
  struct Block;
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BySizeThenAddress>;
  struct PoolKey {
    StreamId stream;
    bool small;
    bool operator<(const PoolKey& o) const {
      return stream != o.stream ? stream < o.stream : small < o.small;
    }
  };

  Block* find_free(FreeSet& pool, size_t rounded);
  Block* new_segment(size_t rounded, StreamId stream, bool small);
  void split(Block* block, size_t rounded, FreeSet& pool);
  void release_free_segments();
  std::string summary_locked() const;

  std::unique_ptr<MemorySource> source_;
  mutable std::mutex mutex_;
  StreamId stream_ = 0;
  std::map<PoolKey, FreeSet> pools_;
  std::unordered_map<void*, Block*> in_use_blocks_;
  CachingAllocatorStats stats_;
};

}  // namespace tessel
