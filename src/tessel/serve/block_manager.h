// SPDX-License-Identifier: Apache-2.0
// The block manager of the paged KV cache (PagedAttention, Kwon et al. 2023) with automatic
// prefix caching by hash chain (as in vLLM): which KV blocks each sequence's positions live in,
// which full blocks are shared by sequences with a common prefix or by the choices of one request
// (copy-on-write), and which blocks stay cached after their sequences end (evicted least recently
// used first). Pure bookkeeping over block ids: the engine owns the KV pools
// ([num_blocks, block_size, Hkv, D] per layer) and performs the block copies reported here.
// Not thread-safe: the engine's thread is its only user. docs/SERVING.md describes the life cycle.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessel/serve/block_allocator.h"
#include "tessel/serve/prefix_cache.h"

namespace tessel::serve {

// total == used + cached + free. used: blocks in some sequence's table; cached: kept by the
// prefix cache with no user (evictable); free: on the free list. prefix_queries / prefix_hits
// count prompt blocks looked up / found in begin_sequence; evictions count cached blocks taken
// for new allocations.
struct BlockManagerStats {
  int64_t total = 0, used = 0, cached = 0, free = 0;
  int64_t prefix_queries = 0, prefix_hits = 0, evictions = 0;
};

class BlockManager {
 public:
  // `hash` is the chain's link hash; tests replace it to force collisions.
  BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching,
               BlockHashFn hash = block_hash);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return allocator_.num_blocks(); }
  bool prefix_caching() const { return prefix_caching_; }

  // Starts sequence `seq` (an id the engine chooses, not live) for `tokens` (its prompt, non-
  // empty): reuses the longest run of full blocks from the start of `tokens` found in the prefix
  // cache, but never all of tokens (the last token is always computed so that logits exist).
  // Returns how many leading tokens already have their KV (a multiple of block_size); the
  // sequence's length() is that many positions.
  int64_t begin_sequence(int64_t seq, std::span<const int64_t> tokens);
  // Side-effect-free look-ahead for admission: the tokens begin_sequence(tokens) would reuse now,
  // and how many of free_blocks() begin_sequence(tokens) followed by growing the sequence to
  // `length` positions would take (new blocks plus cached blocks it revives).
  int64_t cached_prefix(std::span<const int64_t> tokens) const;
  int64_t blocks_needed_to_begin(std::span<const int64_t> tokens, int64_t length) const;

  // New blocks append_slots(seq, count) would take now (including a copy-on-write copy).
  int64_t blocks_needed(int64_t seq, int64_t count) const;
  // Blocks allocatable now: free plus cached-but-unreferenced (evictable).
  int64_t free_blocks() const { return allocator_.num_free() + allocator_.num_evictable(); }

  // Gives positions [length, length + count) of seq slots, allocating blocks (evicting the least
  // recently used cached block when the free list is empty). When the block to be written is
  // shared (refcount > 1) it is copied first: the copy's id replaces it in seq's table and
  // (source, destination) is appended to `copies` for the engine to copy the KV before writing.
  // Returns false and changes nothing when there are not enough blocks.
  bool append_slots(int64_t seq, int64_t count, std::vector<std::pair<BlockId, BlockId>>& copies);

  // The KV slot of `position` (< length): block_table[p / bs] * bs + p % bs.
  int64_t slot(int64_t seq, int64_t position) const;
  const std::vector<BlockId>& block_table(int64_t seq) const;
  int64_t length(int64_t seq) const;  // positions with slots

  // The KV of positions [0, computed) of seq is now written (computed <= length); `tokens` are
  // seq's token ids (at least `computed` of them): its full blocks become findable in the prefix
  // cache. Cheap to call every step: only blocks not yet registered are hashed.
  void mark_computed(int64_t seq, std::span<const int64_t> tokens, int64_t computed);

  // `child` (not live) shares all of `parent`'s blocks (n > 1 choices of one request); the first
  // write of either into the shared last block copies it.
  void fork(int64_t parent, int64_t child);

  // Drops seq: refcounts down; a cached (full, computed) block with refcount 0 stays cached,
  // evictable; others go back to the free list. A sequence's tail blocks are queued for eviction
  // before its head blocks, since a child link is useless once its parent is gone.
  void free_sequence(int64_t seq);

  bool has_sequence(int64_t seq) const { return sequences_.contains(seq); }
  int64_t num_sequences() const { return static_cast<int64_t>(sequences_.size()); }
  BlockManagerStats stats() const;

  // Throws Error unless every block is in exactly one of free list / LRU list / sequences'
  // tables, refcounts equal the number of table entries, and the prefix index is consistent.
  void check_invariants() const;

 private:
  struct Sequence {
    std::vector<BlockId> table;
    int64_t length = 0;
    // The hash chain walked so far: blocks [0, registered) were offered to the prefix cache;
    // chain_parent is the cache entry holding the prefix up to there (possibly another
    // sequence's block with the same content), chain_key its key.
    int64_t registered = 0;
    uint64_t chain_key = PrefixCache::kRootKey;
    BlockRef chain_parent;
    bool chain_broken = false;  // a collision or an evicted parent: no more blocks cached
  };

  Sequence& get(int64_t seq);
  const Sequence& get(int64_t seq) const;
  // The leading cached blocks for `tokens` (at most (size - 1) / block_size), with their chain.
  struct Match {
    std::vector<BlockId> blocks;
    uint64_t key = PrefixCache::kRootKey;
    BlockRef parent;
  };
  Match match(std::span<const int64_t> tokens) const;
  BlockId take_block();  // free list first, else evicts the LRU cached block
  void release_block(BlockId block);
  std::span<const int64_t> block_tokens(std::span<const int64_t> tokens, int64_t index) const;

  int64_t block_size_;
  bool prefix_caching_;
  BlockAllocator allocator_;
  PrefixCache cache_;
  std::unordered_map<int64_t, Sequence> sequences_;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0, evictions_ = 0;
};

}  // namespace tessel::serve
