// SPDX-License-Identifier: Apache-2.0
// The prefix cache's index: hash-chain keys, verified against stored tokens and parent identity.
#include "tessel/serve/prefix_cache.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel::serve {
namespace {

// A bijective 64-bit finaliser (xor-shift / multiply rounds): every input bit reaches every
// output bit, so chained keys of different prefixes collide only by chance (2^-64 per pair).
uint64_t mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  return x;
}

}  // namespace

uint64_t block_hash(uint64_t parent_key, std::span<const int64_t> tokens) {
  uint64_t h = mix(parent_key ^ (0x9e3779b97f4a7c15ULL * (tokens.size() + 1)));
  for (int64_t t : tokens) h = mix(h + 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(t));
  return h;
}

PrefixCache::PrefixCache(int64_t num_blocks, int64_t block_size, BlockHashFn hash)
    : block_size_(block_size), hash_(hash) {
  TESSEL_CHECK(num_blocks > 0 && block_size > 0, "prefix cache: num_blocks ", num_blocks,
               " and block_size ", block_size, " must be positive");
  TESSEL_CHECK(hash != nullptr, "prefix cache: no hash function");
  cached_.assign(num_blocks, 0);
  key_.assign(num_blocks, 0);
  generation_.assign(num_blocks, 0);
  parent_.assign(num_blocks, BlockRef{});
  tokens_.assign(num_blocks * block_size, 0);
  index_.reserve(num_blocks);
}

std::span<const int64_t> PrefixCache::tokens_of(BlockId block) const {
  return {tokens_.data() + static_cast<int64_t>(block) * block_size_,
          static_cast<size_t>(block_size_)};
}

BlockId PrefixCache::entry(uint64_t key) const {
  auto it = index_.find(key);
  return it == index_.end() ? kNoBlock : it->second;
}

bool PrefixCache::matches(BlockId block, std::span<const int64_t> tokens, BlockRef parent) const {
  if (!cached_[block] || parent_[block] != parent) return false;
  const auto stored = tokens_of(block);
  return std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end());
}

BlockId PrefixCache::find(uint64_t key, std::span<const int64_t> tokens, BlockRef parent) const {
  const BlockId block = entry(key);
  return block != kNoBlock && matches(block, tokens, parent) ? block : kNoBlock;
}

bool PrefixCache::valid(BlockRef ref) const {
  if (ref.id == BlockRef::kRoot) return true;
  return cached_[ref.id] && generation_[ref.id] == ref.generation;
}

void PrefixCache::insert(BlockId block, uint64_t key, std::span<const int64_t> tokens,
                         BlockRef parent) {
  TESSEL_CHECK(!cached_[block], "prefix cache: block ", block, " is cached already");
  TESSEL_CHECK(static_cast<int64_t>(tokens.size()) == block_size_, "prefix cache: block ", block,
               " given ", tokens.size(), " tokens, block_size is ", block_size_);
  const auto [it, inserted] = index_.emplace(key, block);
  TESSEL_CHECK(inserted, "prefix cache: key ", key, " is taken by block ", it->second,
               " (inserting block ", block, ")");
  cached_[block] = 1;
  key_[block] = key;
  parent_[block] = parent;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + int64_t{block} * block_size_);
}

void PrefixCache::erase(BlockId block) {
  TESSEL_CHECK(cached_[block], "prefix cache: erase of uncached block ", block);
  index_.erase(key_[block]);
  cached_[block] = 0;
  ++generation_[block];
}

void PrefixCache::check_invariants() const {
  int64_t count = 0;
  for (size_t b = 0; b < cached_.size(); ++b) {
    if (!cached_[b]) continue;
    ++count;
    const BlockId indexed = entry(key_[b]);
    TESSEL_CHECK(indexed == static_cast<BlockId>(b), "prefix cache: block ", b, "'s key ", key_[b],
                 " leads to block ", indexed);
    TESSEL_CHECK(parent_[b].id != static_cast<BlockId>(b), "prefix cache: block ", b,
                 " is its own parent");
  }
  TESSEL_CHECK(count == size(), "prefix cache: ", count, " blocks marked cached, index holds ",
               size());
}

}  // namespace tessel::serve
