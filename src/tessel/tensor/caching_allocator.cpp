// SPDX-License-Identifier: Apache-2.0
#include "tessel/tensor/caching_allocator.h"

#include <algorithm>
#include <cstdio>

#include "tessel/core/error.h"

namespace tessel {

// A block is a piece of one segment; prev/next link the blocks of a segment in address order, so
// a freed block finds its neighbours without a search.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  StreamId stream = 0;
  bool small = false;
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;
};

bool CachingAllocator::BySizeThenAddress::operator()(const Block* a, const Block* b) const {
  return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
}

namespace {
std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}
}  // namespace

CachingAllocator::CachingAllocator(std::unique_ptr<MemorySource> source)
    : source_(std::move(source)) {
  TESSEL_CHECK(source_ != nullptr, "CachingAllocator: no memory source");
}

CachingAllocator::~CachingAllocator() {
  // Blocks still in use belong to tensors that outlive the allocator (process exit); their
  // segments are left to the source's owner, only the wholly free ones are returned.
  std::lock_guard<std::mutex> lock(mutex_);
  release_free_segments();
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes == 0) return kRoundBytes;
  return (nbytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded <= kMediumRequest) return kMediumSegment;
  return (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void CachingAllocator::set_stream(StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  stream_ = stream;
}

StreamId CachingAllocator::stream() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stream_;
}

void* CachingAllocator::allocate(size_t nbytes) {
  return allocate_on(nbytes, stream());
}

CachingAllocator::Block* CachingAllocator::find_free(FreeSet& pool, size_t rounded) {
  Block key;
  key.size = rounded;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t rounded, StreamId stream,
                                                       bool small) {
  size_t seg = segment_size(rounded);
  void* p = source_->acquire(seg);
  if (p == nullptr) {
    release_free_segments();
    p = source_->acquire(seg);
  }
  if (p == nullptr && seg > rounded) {
    // A nearly full device may still hold the request itself: a segment of just its size.
    seg = rounded;
    p = source_->acquire(seg);
  }
  if (p == nullptr) return nullptr;
  ++stats_.source_acquires;
  ++stats_.segments;
  stats_.reserved += seg;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  auto* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = seg;
  b->stream = stream;
  b->small = small;
  return b;
}

// Keeps the first `rounded` bytes of block and puts the rest back in the pool, when the rest is
// big enough to serve a request of its pool (small pools keep any remainder; large pools only
// remainders over kSmallRequest, which a small request must not fragment).
void CachingAllocator::split(Block* block, size_t rounded, FreeSet& pool) {
  size_t rest = block->size - rounded;
  bool worth = block->small ? rest >= kRoundBytes : rest > kSmallRequest;
  if (!worth) return;
  auto* r = new Block;
  r->ptr = block->ptr + rounded;
  r->size = rest;
  r->stream = block->stream;
  r->small = block->small;
  r->prev = block;
  r->next = block->next;
  if (block->next != nullptr) block->next->prev = r;
  block->next = r;
  block->size = rounded;
  pool.insert(r);
}

void* CachingAllocator::allocate_on(size_t nbytes, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t rounded = round_size(nbytes);
  const bool small = rounded <= kSmallRequest;
  FreeSet& pool = pools_[PoolKey{stream, small}];
  Block* b = find_free(pool, rounded);
  if (b != nullptr) {
    ++stats_.cache_hits;
  } else {
    b = new_segment(rounded, stream, small);
    if (b == nullptr) {
      ++stats_.out_of_memory;
      TESSEL_FAIL("out of memory on ", source_->device().str(), ": cannot allocate ", nbytes,
                  " bytes (", mib(nbytes), "; no cached block fits and the source has no ",
                  mib(rounded), " left) on stream ", stream, "; ", summary_locked(),
                  "; source: ", source_->describe());
    }
  }
  split(b, rounded, pool);
  b->allocated = true;
  in_use_blocks_[b->ptr] = b;
  stats_.in_use += b->size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  ++stats_.allocations;
  count_alloc(nbytes);
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_blocks_.find(ptr);
  TESSEL_CHECK(it != in_use_blocks_.end(), "CachingAllocator on ", source_->device().str(),
               ": freeing ", ptr, " (", nbytes, " bytes), which it did not hand out");
  Block* b = it->second;
  in_use_blocks_.erase(it);
  b->allocated = false;
  stats_.in_use -= b->size;
  count_free(nbytes);
  FreeSet& pool = pools_[PoolKey{b->stream, b->small}];
  // Coalesce with free neighbours of the same segment.
  if (b->prev != nullptr && !b->prev->allocated) {
    Block* p = b->prev;
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    delete b;
    b = p;
  }
  if (b->next != nullptr && !b->next->allocated) {
    Block* n = b->next;
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    delete n;
  }
  pool.insert(b);
}

void CachingAllocator::release_free_segments() {
  for (auto& [key, pool] : pools_) {
    for (auto it = pool.begin(); it != pool.end();) {
      Block* b = *it;
      if (b->prev == nullptr && b->next == nullptr) {
        source_->release(b->ptr, b->size);
        ++stats_.source_releases;
        --stats_.segments;
        stats_.reserved -= b->size;
        delete b;
        it = pool.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_free_segments();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CachingAllocatorStats s = stats_;
  s.cached_free = s.reserved - s.in_use;
  for (const auto& [key, pool] : pools_)
    if (!pool.empty()) s.largest_free = std::max(s.largest_free, (*pool.rbegin())->size);
  return s;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_in_use = stats_.in_use;
  stats_.peak_reserved = stats_.reserved;
  reset_peak();
}

std::string CachingAllocator::summary_locked() const {
  size_t largest = 0, cached = stats_.reserved - stats_.in_use;
  int64_t free_blocks = 0;
  for (const auto& [key, pool] : pools_) {
    free_blocks += int64_t(pool.size());
    if (!pool.empty()) largest = std::max(largest, (*pool.rbegin())->size);
  }
  return mib(stats_.in_use) + " in use (peak " + mib(stats_.peak_in_use) + "), " +
         mib(stats_.reserved) + " reserved in " + std::to_string(stats_.segments) + " segments, " +
         mib(cached) + " cached in " + std::to_string(free_blocks) + " free blocks (largest " +
         mib(largest) + ")";
}

std::string CachingAllocator::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return summary_locked();
}

}  // namespace tessel
