// SPDX-License-Identifier: Apache-2.0
// The KV block pool: refcounts, a free stack and an intrusive LRU list of evictable blocks.
#include "tessel/serve/block_allocator.h"

#include <limits>

#include "tessel/core/error.h"

namespace tessel::serve {

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  TESSEL_CHECK(num_blocks > 0 && num_blocks <= std::numeric_limits<BlockId>::max(),
               "block allocator: num_blocks must be in [1, 2^31), got ", num_blocks);
  refcount_.assign(num_blocks, 0);
  on_free_list_.assign(num_blocks, 1);
  in_lru_.assign(num_blocks, 0);
  lru_prev_.assign(num_blocks, kNoBlock);
  lru_next_.assign(num_blocks, kNoBlock);
  // Reversed, so that block 0 is handed out first: tables read in order on a fresh pool.
  free_.reserve(num_blocks);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<BlockId>(b));
}

void BlockAllocator::check_id(BlockId block) const {
  TESSEL_CHECK(block >= 0 && block < num_blocks(), "block allocator: block ", block,
               " out of range [0, ", num_blocks(), ")");
}

int32_t BlockAllocator::refcount(BlockId block) const {
  check_id(block);
  return refcount_[block];
}

bool BlockAllocator::evictable(BlockId block) const {
  check_id(block);
  return in_lru_[block] != 0;
}

BlockId BlockAllocator::pop_free() {
  TESSEL_CHECK(!free_.empty(), "block allocator: the free list is empty");
  const BlockId block = free_.back();
  free_.pop_back();
  on_free_list_[block] = 0;
  refcount_[block] = 1;
  return block;
}

BlockId BlockAllocator::pop_lru() {
  TESSEL_CHECK(lru_head_ != kNoBlock, "block allocator: no evictable block");
  const BlockId block = lru_head_;
  lru_unlink(block);
  refcount_[block] = 1;
  return block;
}

void BlockAllocator::acquire(BlockId block) {
  check_id(block);
  TESSEL_CHECK(!on_free_list_[block], "block allocator: acquire of free block ", block);
  if (in_lru_[block]) lru_unlink(block);
  ++refcount_[block];
}

void BlockAllocator::release(BlockId block, bool keep) {
  check_id(block);
  TESSEL_CHECK(refcount_[block] > 0, "block allocator: release of unreferenced block ", block);
  if (--refcount_[block] > 0) return;
  if (keep) {
    lru_push_back(block);
  } else {
    free_.push_back(block);
    on_free_list_[block] = 1;
  }
}

void BlockAllocator::discard(BlockId block) {
  check_id(block);
  TESSEL_CHECK(in_lru_[block], "block allocator: discard of block ", block,
               " which is not evictable (refcount ", refcount_[block], ")");
  lru_unlink(block);
  free_.push_back(block);
  on_free_list_[block] = 1;
}

void BlockAllocator::lru_unlink(BlockId block) {
  const BlockId prev = lru_prev_[block], next = lru_next_[block];
  (prev == kNoBlock ? lru_head_ : lru_next_[prev]) = next;
  (next == kNoBlock ? lru_tail_ : lru_prev_[next]) = prev;
  lru_prev_[block] = lru_next_[block] = kNoBlock;
  in_lru_[block] = 0;
  --num_evictable_;
}

void BlockAllocator::lru_push_back(BlockId block) {
  lru_prev_[block] = lru_tail_;
  lru_next_[block] = kNoBlock;
  (lru_tail_ == kNoBlock ? lru_head_ : lru_next_[lru_tail_]) = block;
  lru_tail_ = block;
  in_lru_[block] = 1;
  ++num_evictable_;
}

void BlockAllocator::check_invariants() const {
  const int64_t n = num_blocks();
  std::vector<uint8_t> seen_free(n, 0);
  for (BlockId b : free_) {
    TESSEL_CHECK(b >= 0 && b < n, "block allocator: free list holds block ", b);
    TESSEL_CHECK(!seen_free[b], "block allocator: block ", b, " twice on the free list");
    seen_free[b] = 1;
    TESSEL_CHECK(on_free_list_[b], "block allocator: block ", b, " on the free list, unmarked");
  }
  int64_t lru_count = 0;
  BlockId prev = kNoBlock;
  for (BlockId b = lru_head_; b != kNoBlock; prev = b, b = lru_next_[b]) {
    TESSEL_CHECK(lru_count < n, "block allocator: the LRU list has a cycle");
    TESSEL_CHECK(in_lru_[b], "block allocator: block ", b, " in the LRU list, unmarked");
    TESSEL_CHECK(lru_prev_[b] == prev, "block allocator: LRU back link of block ", b, " is ",
                 lru_prev_[b], ", expected ", prev);
    ++lru_count;
  }
  TESSEL_CHECK(prev == lru_tail_, "block allocator: LRU tail ", lru_tail_, ", expected ", prev);
  TESSEL_CHECK(lru_count == num_evictable_, "block allocator: ", lru_count,
               " blocks in the LRU list, counted ", num_evictable_);
  for (int64_t b = 0; b < n; ++b) {
    const int states = (seen_free[b] ? 1 : 0) + (in_lru_[b] ? 1 : 0) + (refcount_[b] > 0 ? 1 : 0);
    TESSEL_CHECK(states == 1, "block allocator: block ", b, " is in ", states, " states (free ",
                 int(seen_free[b]), ", evictable ", int(in_lru_[b]), ", refcount ", refcount_[b],
                 ")");
    TESSEL_CHECK(on_free_list_[b] == seen_free[b], "block allocator: free mark of block ", b);
  }
}

}  // namespace tessel::serve
