// SPDX-License-Identifier: Apache-2.0
// The pool of KV-cache blocks of the paged KV cache (PagedAttention, Kwon et al. 2023), as pure
// bookkeeping over block ids: a reference count per block, a free list, and the least-recently-
// released order of the blocks the prefix cache keeps after their last user went away. Every
// operation is O(1): the engine calls these for every sequence at every step.
#pragma once

#include <cstdint>
#include <vector>

namespace tessel::serve {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;  // "none" where a block id is expected

// A block is in exactly one state: free (on the free list, refcount 0), evictable (refcount 0,
// kept for the prefix cache, in the LRU list) or referenced (refcount > 0, in sequences' tables).
class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(refcount_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_evictable() const { return num_evictable_; }
  int64_t num_referenced() const { return num_blocks() - num_free() - num_evictable(); }

  int32_t refcount(BlockId block) const;
  bool evictable(BlockId block) const;

  // A block off the free list with refcount 1. The free list must not be empty.
  BlockId pop_free();
  // The least recently released evictable block, now with refcount 1. There must be one.
  BlockId pop_lru();
  // One more user of `block`; an evictable block is revived (leaves the LRU list).
  void acquire(BlockId block);
  // One user fewer; at refcount 0 the block becomes evictable (keep) or free (not keep).
  void release(BlockId block, bool keep);
  // An evictable block goes to the free list (the prefix cache dropped it).
  void discard(BlockId block);

  // Throws Error on any inconsistency between refcounts, the free list and the LRU list.
  void check_invariants() const;

 private:
  void check_id(BlockId block) const;
  void lru_unlink(BlockId block);
  void lru_push_back(BlockId block);

  std::vector<int32_t> refcount_;
  std::vector<BlockId> free_;  // a stack: the most recently freed block is reused first
  std::vector<uint8_t> on_free_list_;
  // The LRU list, intrusive: prev/next per block; kNoBlock ends it. Evicted from the head.
  std::vector<BlockId> lru_prev_, lru_next_;
  std::vector<uint8_t> in_lru_;
  BlockId lru_head_ = kNoBlock, lru_tail_ = kNoBlock;
  int64_t num_evictable_ = 0;
};

}  // namespace tessel::serve
