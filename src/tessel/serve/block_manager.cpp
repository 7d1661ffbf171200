// SPDX-License-Identifier: Apache-2.0
// The block manager: sequences' block tables over the block pool and the prefix cache
// (PagedAttention, Kwon et al. 2023; automatic prefix caching by hash chain as in vLLM).
#include "tessel/serve/block_manager.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel::serve {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t checked_block_size(int64_t block_size) {
  TESSEL_CHECK(block_size > 0, "block manager: block_size must be positive, got ", block_size);
  return block_size;
}

}  // namespace

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching,
                           BlockHashFn hash)
    : block_size_(checked_block_size(block_size)),
      prefix_caching_(prefix_caching),
      allocator_(num_blocks),
      cache_(num_blocks, block_size, hash) {}

BlockManager::Sequence& BlockManager::get(int64_t seq) {
  auto it = sequences_.find(seq);
  TESSEL_CHECK(it != sequences_.end(), "block manager: unknown sequence ", seq);
  return it->second;
}

const BlockManager::Sequence& BlockManager::get(int64_t seq) const {
  auto it = sequences_.find(seq);
  TESSEL_CHECK(it != sequences_.end(), "block manager: unknown sequence ", seq);
  return it->second;
}

std::span<const int64_t> BlockManager::block_tokens(std::span<const int64_t> tokens,
                                                    int64_t index) const {
  return tokens.subspan(index * block_size_, block_size_);
}

BlockManager::Match BlockManager::match(std::span<const int64_t> tokens) const {
  Match m;
  if (!prefix_caching_) return m;
  // The last token is always computed, so a prompt of whole blocks reuses one block fewer.
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const auto block_tok = block_tokens(tokens, i);
    const uint64_t key = cache_.key(m.key, block_tok);
    const BlockId block = cache_.find(key, block_tok, m.parent);
    if (block == kNoBlock) break;
    m.blocks.push_back(block);
    m.key = key;
    m.parent = cache_.ref(block);
  }
  return m;
}

int64_t BlockManager::begin_sequence(int64_t seq, std::span<const int64_t> tokens) {
  TESSEL_CHECK(!sequences_.contains(seq), "block manager: sequence ", seq, " is live already");
  TESSEL_CHECK(!tokens.empty(), "block manager: sequence ", seq, " begins with no tokens");
  Match m = match(tokens);
  if (prefix_caching_) {
    prefix_queries_ += (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
    prefix_hits_ += static_cast<int64_t>(m.blocks.size());
  }
  for (BlockId block : m.blocks) allocator_.acquire(block);
  Sequence& s = sequences_[seq];
  s.length = static_cast<int64_t>(m.blocks.size()) * block_size_;
  s.registered = static_cast<int64_t>(m.blocks.size());
  s.chain_key = m.key;
  s.chain_parent = m.parent;
  s.table = std::move(m.blocks);
  return s.length;
}

int64_t BlockManager::cached_prefix(std::span<const int64_t> tokens) const {
  return static_cast<int64_t>(match(tokens).blocks.size()) * block_size_;
}

int64_t BlockManager::blocks_needed_to_begin(std::span<const int64_t> tokens,
                                             int64_t length) const {
  TESSEL_CHECK(length >= 0, "block manager: negative length ", length);
  const Match m = match(tokens);
  const int64_t reused = static_cast<int64_t>(m.blocks.size());
  const int64_t revived = std::count_if(m.blocks.begin(), m.blocks.end(),
                                        [&](BlockId b) { return allocator_.evictable(b); });
  return revived + std::max<int64_t>(0, ceil_div(length, block_size_) - reused);
}

int64_t BlockManager::blocks_needed(int64_t seq, int64_t count) const {
  TESSEL_CHECK(count >= 0, "block manager: sequence ", seq, " asks for ", count, " slots");
  const Sequence& s = get(seq);
  const int64_t fresh =
      ceil_div(s.length + count, block_size_) - static_cast<int64_t>(s.table.size());
  // Writing into a partly filled last block that another sequence shares needs a copy of it.
  const bool copy =
      count > 0 && s.length % block_size_ != 0 && allocator_.refcount(s.table.back()) > 1;
  return fresh + (copy ? 1 : 0);
}

BlockId BlockManager::take_block() {
  if (allocator_.num_free() > 0) return allocator_.pop_free();
  const BlockId block = allocator_.pop_lru();
  cache_.erase(block);
  ++evictions_;
  return block;
}

void BlockManager::release_block(BlockId block) {
  allocator_.release(block, cache_.contains(block));
}

bool BlockManager::append_slots(int64_t seq, int64_t count,
                                std::vector<std::pair<BlockId, BlockId>>& copies) {
  const int64_t needed = blocks_needed(seq, count);
  if (needed > free_blocks()) return false;
  if (count == 0) return true;
  Sequence& s = get(seq);
  if (s.length % block_size_ != 0 && allocator_.refcount(s.table.back()) > 1) {
    const BlockId source = s.table.back();
    const BlockId copy = take_block();
    copies.emplace_back(source, copy);
    release_block(source);  // still referenced by the sequences sharing it
    s.table.back() = copy;
  }
  s.length += count;
  while (static_cast<int64_t>(s.table.size()) < ceil_div(s.length, block_size_)) {
    s.table.push_back(take_block());
  }
  return true;
}

int64_t BlockManager::slot(int64_t seq, int64_t position) const {
  const Sequence& s = get(seq);
  TESSEL_CHECK(position >= 0 && position < s.length, "block manager: position ", position,
               " of sequence ", seq, " has no slot (length ", s.length, ")");
  return int64_t{s.table[position / block_size_]} * block_size_ + position % block_size_;
}

const std::vector<BlockId>& BlockManager::block_table(int64_t seq) const {
  return get(seq).table;
}

int64_t BlockManager::length(int64_t seq) const {
  return get(seq).length;
}

void BlockManager::mark_computed(int64_t seq, std::span<const int64_t> tokens, int64_t computed) {
  Sequence& s = get(seq);
  TESSEL_CHECK(computed >= 0 && computed <= s.length, "block manager: sequence ", seq, " computed ",
               computed, " positions, it has ", s.length, " slots");
  TESSEL_CHECK(static_cast<int64_t>(tokens.size()) >= computed, "block manager: sequence ", seq,
               " computed ", computed, " positions but gave ", tokens.size(), " tokens");
  const int64_t full = computed / block_size_;
  if (!prefix_caching_ || s.chain_broken || full <= s.registered) {
    s.registered = std::max(s.registered, full);
    return;
  }
  for (int64_t i = s.registered; i < full; ++i) {
    // The parent entry may have been evicted since the last call (it can be another sequence's
    // block): a child of a gone parent could never be found, so the chain stops here.
    if (!cache_.valid(s.chain_parent)) {
      s.chain_broken = true;
      break;
    }
    const auto block_tok = block_tokens(tokens, i);
    const uint64_t key = cache_.key(s.chain_key, block_tok);
    const BlockId own = s.table[i];
    BlockId canonical = cache_.entry(key);
    if (canonical != kNoBlock && !cache_.matches(canonical, block_tok, s.chain_parent)) {
      if (cache_.valid(cache_.parent(canonical))) {
        // A live entry for other tokens under the same key: a hash collision. Sharing it would
        // be wrong and replacing it would orphan its children, so this chain stops caching.
        s.chain_broken = true;
        break;
      }
      // A stale entry (its parent was evicted): unreachable, so ours takes its key.
      cache_.erase(canonical);
      if (allocator_.evictable(canonical)) allocator_.discard(canonical);
      canonical = kNoBlock;
    }
    if (canonical == kNoBlock) {
      if (cache_.contains(own)) {  // cached under another chain: the tokens given disagree
        s.chain_broken = true;
        break;
      }
      cache_.insert(own, key, block_tok, s.chain_parent);
      canonical = own;
    }
    // Another sequence computed the same prefix first (a duplicate): ours stays uncached and
    // the chain continues from the cached one, whose content is the same.
    s.chain_key = key;
    s.chain_parent = cache_.ref(canonical);
  }
  s.registered = full;
}

void BlockManager::fork(int64_t parent, int64_t child) {
  TESSEL_CHECK(!sequences_.contains(child), "block manager: fork of sequence ", parent, " into ",
               child, ", which is live already");
  const Sequence& p = get(parent);
  for (BlockId block : p.table) allocator_.acquire(block);
  Sequence copy = p;
  sequences_.emplace(child, std::move(copy));
}

void BlockManager::free_sequence(int64_t seq) {
  Sequence& s = get(seq);
  for (auto it = s.table.rbegin(); it != s.table.rend(); ++it) release_block(*it);
  sequences_.erase(seq);
}

BlockManagerStats BlockManager::stats() const {
  BlockManagerStats st;
  st.total = allocator_.num_blocks();
  st.used = allocator_.num_referenced();
  st.cached = allocator_.num_evictable();
  st.free = allocator_.num_free();
  st.prefix_queries = prefix_queries_;
  st.prefix_hits = prefix_hits_;
  st.evictions = evictions_;
  return st;
}

void BlockManager::check_invariants() const {
  allocator_.check_invariants();
  cache_.check_invariants();
  std::vector<int32_t> refs(num_blocks(), 0);
  for (const auto& [id, s] : sequences_) {
    TESSEL_CHECK(static_cast<int64_t>(s.table.size()) == ceil_div(s.length, block_size_),
                 "block manager: sequence ", id, " has ", s.table.size(), " blocks for length ",
                 s.length);
    TESSEL_CHECK(s.registered <= static_cast<int64_t>(s.table.size()), "block manager: sequence ",
                 id, " offered ", s.registered, " blocks to the cache, it has ", s.table.size());
    for (BlockId b : s.table) {
      TESSEL_CHECK(b >= 0 && b < num_blocks(), "block manager: sequence ", id, " holds block ", b);
      ++refs[b];
    }
  }
  for (BlockId b = 0; b < num_blocks(); ++b) {
    TESSEL_CHECK(refs[b] == allocator_.refcount(b), "block manager: block ", b, " is in ", refs[b],
                 " tables, refcount ", allocator_.refcount(b));
    // Evictable blocks exist only for the prefix cache; free blocks are never cached.
    if (refs[b] == 0) {
      TESSEL_CHECK(allocator_.evictable(b) == cache_.contains(b), "block manager: block ", b,
                   " unreferenced, evictable ", allocator_.evictable(b), ", cached ",
                   cache_.contains(b));
    }
  }
}

}  // namespace tessel::serve
