// SPDX-License-Identifier: Apache-2.0
// The block manager's prefix cache over time: least-recently-used eviction of cached blocks and
// revival by a prefix hit, hash collisions (forced through the hash hook) that must never share
// wrong KV, and a chain link whose parent was evicted being replaced by a recomputed one.
#include <gtest/gtest.h>

#include <numeric>

#include "tessel/serve/block_manager.h"

namespace tessel::serve {
namespace {

using Copies = std::vector<std::pair<BlockId, BlockId>>;

void prefill(BlockManager& bm, int64_t seq, const std::vector<int64_t>& tokens) {
  const int64_t reused = bm.begin_sequence(seq, tokens);
  Copies copies;
  ASSERT_TRUE(bm.append_slots(seq, static_cast<int64_t>(tokens.size()) - reused, copies));
  bm.mark_computed(seq, tokens, static_cast<int64_t>(tokens.size()));
  bm.check_invariants();
}

// Grows `seq` by one block and returns the block it was given.
BlockId grow_one_block(BlockManager& bm, int64_t seq) {
  Copies copies;
  EXPECT_TRUE(bm.append_slots(seq, bm.block_size(), copies));
  bm.check_invariants();
  return bm.block_table(seq).back();
}

TEST(BlockManagerCache, EvictsLeastRecentlyReleasedFirstAndNeverARevivedBlock) {
  BlockManager bm(6, 2, true);
  const std::vector<int64_t> x = {1, 2, 3, 4, 5}, y = {11, 12, 13, 14, 15};
  prefill(bm, 0, x);
  const std::vector<BlockId> tx = bm.block_table(0);
  bm.free_sequence(0);  // x's blocks 0 and 1 stay cached, its partial block 2 is free
  prefill(bm, 1, y);
  const std::vector<BlockId> ty = bm.block_table(1);
  bm.free_sequence(1);
  EXPECT_EQ(bm.stats().cached, 4);
  EXPECT_EQ(bm.stats().free, 2);
  EXPECT_EQ(bm.free_blocks(), 6);

  // A later prompt that starts like x revives x's first block: referenced, no longer evictable.
  EXPECT_EQ(bm.begin_sequence(2, std::vector<int64_t>{1, 2, 7, 7, 7}), 2);
  EXPECT_EQ(bm.block_table(2), std::vector<BlockId>{tx[0]});
  EXPECT_EQ(bm.stats().cached, 3);
  EXPECT_EQ(bm.free_blocks(), 5);

  // Another sequence takes blocks one at a time: the free ones, then the cached ones in the order
  // their last user released them (a sequence's tail before its head).
  bm.begin_sequence(3, std::vector<int64_t>{50});
  const BlockId f1 = grow_one_block(bm, 3), f2 = grow_one_block(bm, 3);
  EXPECT_EQ(bm.stats().evictions, 0);
  EXPECT_NE(f1, f2);
  for (BlockId b : {f1, f2}) {
    EXPECT_NE(b, tx[0]);
    EXPECT_NE(b, tx[1]);
    EXPECT_NE(b, ty[0]);
    EXPECT_NE(b, ty[1]);
  }
  EXPECT_EQ(grow_one_block(bm, 3), tx[1]);
  EXPECT_EQ(grow_one_block(bm, 3), ty[1]);
  EXPECT_EQ(grow_one_block(bm, 3), ty[0]);
  EXPECT_EQ(bm.stats().evictions, 3);
  EXPECT_EQ(bm.free_blocks(), 0);
  Copies copies;
  EXPECT_FALSE(bm.append_slots(3, 1, copies));  // the revived block is not taken
  EXPECT_EQ(bm.cached_prefix(x), 2);            // still findable: x's first block
  EXPECT_EQ(bm.cached_prefix(y), 0);            // evicted

  // Released again, it is evictable again.
  bm.free_sequence(2);
  EXPECT_EQ(bm.stats().cached, 1);
  EXPECT_EQ(grow_one_block(bm, 3), tx[0]);
  EXPECT_EQ(bm.stats().evictions, 4);
  EXPECT_EQ(bm.cached_prefix(x), 0);
  bm.free_sequence(3);
  bm.check_invariants();
  EXPECT_EQ(bm.stats().free, 6);
}

uint64_t constant_hash(uint64_t, std::span<const int64_t>) {
  return 42;
}

TEST(BlockManagerCache, EqualHashesNeverShareDifferentTokens) {
  BlockManager bm(33, 2, true, constant_hash);
  prefill(bm, 0, {1, 2, 3, 4, 5});  // block [1, 2] takes key 42; [3, 4] collides: not cached
  EXPECT_EQ(bm.cached_prefix(std::vector<int64_t>{1, 2, 3, 4, 5}), 2);
  EXPECT_EQ(bm.begin_sequence(1, std::vector<int64_t>{9, 9, 9, 9, 9}), 0);  // key 42, [1, 2]
  EXPECT_EQ(bm.begin_sequence(2, std::vector<int64_t>{1, 2, 8, 8, 8}), 2);
  EXPECT_EQ(bm.block_table(2)[0], bm.block_table(0)[0]);
  EXPECT_EQ(bm.stats().prefix_hits, 1);
  bm.check_invariants();
  for (int64_t seq = 0; seq < 3; ++seq) bm.free_sequence(seq);
  EXPECT_EQ(bm.stats().cached, 1);
  bm.check_invariants();
}

// Ignores the parent key: the same tokens in two places of a prompt get the same key.
uint64_t tokens_only_hash(uint64_t, std::span<const int64_t> tokens) {
  return block_hash(0, tokens);
}

TEST(BlockManagerCache, EqualTokensAfterADifferentPrefixAreNotShared) {
  BlockManager bm(33, 2, true, tokens_only_hash);
  prefill(bm, 0, {5, 6, 7, 8, 0});
  // [7, 8] is cached (under its parent [5, 6]) with the key this prompt's first block asks for.
  EXPECT_EQ(bm.cached_prefix(std::vector<int64_t>{7, 8, 7, 8, 0}), 0);
  EXPECT_EQ(bm.cached_prefix(std::vector<int64_t>{5, 6, 7, 8, 1}), 4);
  // Its own [7, 8] then collides with a live entry: the chain stops, nothing wrong is cached.
  prefill(bm, 1, {7, 8, 7, 8, 0});
  EXPECT_EQ(bm.cached_prefix(std::vector<int64_t>{7, 8, 7, 8, 0}), 0);
  EXPECT_EQ(bm.cached_prefix(std::vector<int64_t>{5, 6, 7, 8, 1}), 4);
}

TEST(BlockManagerCache, DuplicatesChainOnTheCachedCopyAndStaleLinksAreReplaced) {
  BlockManager bm(8, 2, true);
  // Two sequences compute the same first block before either is cached.
  EXPECT_EQ(bm.begin_sequence(0, std::vector<int64_t>{1, 2, 3}), 0);
  EXPECT_EQ(bm.begin_sequence(1, std::vector<int64_t>{1, 2, 3, 4, 5}), 0);
  Copies copies;
  ASSERT_TRUE(bm.append_slots(0, 3, copies));
  ASSERT_TRUE(bm.append_slots(1, 5, copies));
  bm.mark_computed(0, std::vector<int64_t>{1, 2, 3}, 3);
  bm.mark_computed(1, std::vector<int64_t>{1, 2, 3, 4, 5}, 5);
  bm.check_invariants();
  // Sequence 1's first block duplicates sequence 0's; its second links to sequence 0's first.
  const std::vector<int64_t> probe = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(bm.cached_prefix(probe), 4);
  EXPECT_EQ(bm.begin_sequence(2, probe), 4);
  EXPECT_EQ(bm.block_table(2)[0], bm.block_table(0)[0]);
  EXPECT_EQ(bm.block_table(2)[1], bm.block_table(1)[1]);
  bm.free_sequence(2);

  // Sequence 0's first block is evicted: sequence 1's second block is now an orphan.
  bm.free_sequence(0);
  EXPECT_EQ(bm.stats().cached, 1);
  bm.begin_sequence(3, std::vector<int64_t>{40});
  ASSERT_TRUE(bm.append_slots(3, 10, copies));  // every free block and the cached one
  EXPECT_EQ(bm.stats().evictions, 1);
  EXPECT_EQ(bm.cached_prefix(probe), 0);
  bm.free_sequence(3);

  // Recomputing the prefix replaces the orphan, and the chain is whole again.
  const std::vector<int64_t> f = {1, 2, 3, 4, 5, 6, 7};
  prefill(bm, 4, f);
  EXPECT_EQ(bm.begin_sequence(5, std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0}), 6);
  EXPECT_EQ(std::vector<BlockId>(bm.block_table(4).begin(), bm.block_table(4).begin() + 3),
            bm.block_table(5));
  bm.free_sequence(1);  // its blocks are no longer cached: all go back to the free list
  bm.check_invariants();
  EXPECT_EQ(bm.stats().cached, 0);
  EXPECT_EQ(bm.stats().used, 4);
  bm.free_sequence(4);
  bm.free_sequence(5);
  EXPECT_EQ(bm.stats().cached, 3);
  bm.check_invariants();
}

}  // namespace
}  // namespace tessel::serve
