// SPDX-License-Identifier: Apache-2.0
// The prefix cache's index (automatic prefix caching as in vLLM): full, computed KV blocks found
// by a hash chain. A block's key is hash(previous block's key, its block_size token ids), so one
// key stands for the whole prefix up to the block's end. A hash alone is never trusted: each
// entry also stores its tokens and the identity of its parent entry (block id and generation),
// and a lookup matches only when both agree, so by induction a match holds exactly the KV of the
// prefix asked for, whatever the hash function does.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "tessel/serve/block_allocator.h"

namespace tessel::serve {

// The hash of one chain link: (parent key, the block's token ids) -> key.
using BlockHashFn = uint64_t (*)(uint64_t parent_key, std::span<const int64_t> tokens);
// The default link hash: 64-bit multiply-xorshift mixing of every token into the parent key.
uint64_t block_hash(uint64_t parent_key, std::span<const int64_t> tokens);

// A cache entry's identity: the generation changes whenever the block leaves the cache, so a
// child entry whose parent was evicted (and the block reused) no longer matches. id kRoot is the
// start of every chain.
struct BlockRef {
  static constexpr BlockId kRoot = -1;
  BlockId id = kRoot;
  uint64_t generation = 0;
  bool operator==(const BlockRef&) const = default;
};

class PrefixCache {
 public:
  PrefixCache(int64_t num_blocks, int64_t block_size, BlockHashFn hash = block_hash);

  static constexpr uint64_t kRootKey = 0x7e55e1c0ffee5eedULL;
  uint64_t key(uint64_t parent_key, std::span<const int64_t> tokens) const {
    return hash_(parent_key, tokens);
  }

  // The entry for `key` holding `tokens` after `parent`; kNoBlock when there is none.
  BlockId find(uint64_t key, std::span<const int64_t> tokens, BlockRef parent) const;
  // The entry stored under `key`, verified or not; kNoBlock when there is none.
  BlockId entry(uint64_t key) const;
  bool matches(BlockId block, std::span<const int64_t> tokens, BlockRef parent) const;
  // False when `ref` names an entry that has since left the cache.
  bool valid(BlockRef ref) const;
  BlockRef ref(BlockId block) const { return {block, generation_[block]}; }
  BlockRef parent(BlockId block) const { return parent_[block]; }
  bool contains(BlockId block) const { return cached_[block] != 0; }
  int64_t size() const { return static_cast<int64_t>(index_.size()); }

  // Adds `block` under `key`; the key must be free and the block not cached.
  void insert(BlockId block, uint64_t key, std::span<const int64_t> tokens, BlockRef parent);
  // Drops `block` from the cache; its generation moves on.
  void erase(BlockId block);

  void check_invariants() const;

 private:
  std::span<const int64_t> tokens_of(BlockId block) const;

  int64_t block_size_;
  BlockHashFn hash_;
  std::unordered_map<uint64_t, BlockId> index_;
  std::vector<uint8_t> cached_;
  std::vector<uint64_t> key_;
  std::vector<uint64_t> generation_;
  std::vector<BlockRef> parent_;
  std::vector<int64_t> tokens_;  // block_size per block, meaningful while cached
};

}  // namespace tessel::serve
