// SPDX-License-Identifier: Apache-2.0
// The block manager's rules one at a time: allocation on odd pool geometries, prefix sharing by
// hash chain (full blocks only, never the whole prompt), copy-on-write after fork, LRU eviction
// of cached blocks and their revival, and hash collisions that must never share wrong KV.
#include "tessel/serve/block_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <string>

#include "tessel/core/error.h"

namespace tessel::serve {
namespace {

using Copies = std::vector<std::pair<BlockId, BlockId>>;

std::vector<int64_t> iota_tokens(int64_t n, int64_t first) {
  std::vector<int64_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Begins `seq` for `tokens`, gives every prompt position a slot and marks it computed.
int64_t prefill(BlockManager& bm, int64_t seq, const std::vector<int64_t>& tokens) {
  const int64_t reused = bm.begin_sequence(seq, tokens);
  Copies copies;
  EXPECT_TRUE(bm.append_slots(seq, static_cast<int64_t>(tokens.size()) - reused, copies));
  EXPECT_TRUE(copies.empty());
  bm.mark_computed(seq, tokens, static_cast<int64_t>(tokens.size()));
  return reused;
}

void expect_error_naming(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    FAIL() << "no error; expected one naming \"" << text << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

class Geometry : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(Geometry, AllocatesDistinctSlotsUntilFullThenFreesEverything) {
  const auto [bs, nb] = GetParam();
  BlockManager bm(nb, bs, /*prefix_caching=*/false);
  EXPECT_EQ(bm.block_size(), bs);
  EXPECT_EQ(bm.num_blocks(), nb);
  EXPECT_EQ(bm.free_blocks(), nb);
  // Sequences of odd lengths, grown in odd steps, until the pool refuses one.
  std::vector<int64_t> lengths;
  int64_t used = 0;
  Copies copies;
  for (int64_t seq = 0;; ++seq) {
    const int64_t len = 1 + (seq * 7 + 2) % (2 * bs + 3);
    EXPECT_EQ(bm.begin_sequence(seq, iota_tokens(len, 100 * seq)), 0);
    const int64_t need = (len + bs - 1) / bs;
    int64_t given = 0;
    bool refused = false;
    while (given < len) {
      const int64_t step = std::min<int64_t>(1 + given % 3, len - given);
      const int64_t expect_new = (given + step + bs - 1) / bs - (given + bs - 1) / bs;
      ASSERT_EQ(bm.blocks_needed(seq, step), expect_new);
      const auto table_before = bm.block_table(seq);
      const auto stats_before = bm.stats();
      if (!bm.append_slots(seq, step, copies)) {
        EXPECT_GT(expect_new, bm.free_blocks());
        EXPECT_EQ(bm.block_table(seq), table_before);  // refused: nothing changed
        EXPECT_EQ(bm.length(seq), given);
        EXPECT_EQ(bm.stats().free, stats_before.free);
        refused = true;
        break;
      }
      given += step;
      used += expect_new;
      ASSERT_EQ(bm.length(seq), given);
      ASSERT_EQ(bm.stats().used, used);
      bm.check_invariants();
    }
    lengths.push_back(given);
    if (refused) break;
    EXPECT_EQ(static_cast<int64_t>(bm.block_table(seq).size()), need);
  }
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(bm.stats().used, nb - bm.free_blocks());
  // Every position of every sequence has its own slot, and slot() follows the block table.
  std::set<int64_t> slots;
  for (int64_t seq = 0; seq < static_cast<int64_t>(lengths.size()); ++seq) {
    for (int64_t p = 0; p < lengths[seq]; ++p) {
      const int64_t s = bm.slot(seq, p);
      EXPECT_EQ(s, bm.block_table(seq)[p / bs] * bs + p % bs);
      EXPECT_TRUE(slots.insert(s).second) << "slot " << s << " given twice";
      EXPECT_LT(s, nb * bs);
    }
  }
  for (int64_t seq = 0; seq < static_cast<int64_t>(lengths.size()); ++seq) {
    bm.free_sequence(seq);
    EXPECT_FALSE(bm.has_sequence(seq));
    bm.check_invariants();
  }
  const auto st = bm.stats();
  EXPECT_EQ(st.total, nb);
  EXPECT_EQ(st.free, nb);
  EXPECT_EQ(st.used + st.cached, 0);
  EXPECT_EQ(st.prefix_queries, 0);  // prefix caching off: nothing looked up
}

INSTANTIATE_TEST_SUITE_P(BlockManager, Geometry,
                         ::testing::Combine(::testing::Values(1, 3, 16),
                                            ::testing::Values(7, 13, 33)),
                         [](const auto& info) {
                           return "bs" + std::to_string(std::get<0>(info.param)) + "_blocks" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(BlockManager, MisuseIsRefusedByName) {
  BlockManager bm(7, 3, true);
  const auto t = iota_tokens(5, 0);
  bm.begin_sequence(4, t);
  expect_error_naming([&] { bm.begin_sequence(4, t); }, "sequence 4 is live already");
  expect_error_naming([&] { bm.begin_sequence(5, {}); }, "sequence 5 begins with no tokens");
  expect_error_naming([&] { bm.length(9); }, "unknown sequence 9");
  expect_error_naming([&] { bm.free_sequence(9); }, "unknown sequence 9");
  expect_error_naming([&] { bm.slot(4, 0); }, "position 0 of sequence 4 has no slot (length 0)");
  Copies copies;
  ASSERT_TRUE(bm.append_slots(4, 5, copies));
  expect_error_naming([&] { bm.mark_computed(4, t, 6); }, "computed 6 positions, it has 5 slots");
  expect_error_naming([&] { bm.mark_computed(4, iota_tokens(2, 0), 3); }, "gave 2 tokens");
  expect_error_naming([&] { bm.blocks_needed(4, -1); }, "asks for -1 slots");
  bm.fork(4, 6);
  expect_error_naming([&] { bm.fork(4, 6); }, "into 6, which is live already");
  expect_error_naming([] { BlockManager(0, 4, true); }, "num_blocks must be in [1, 2^31), got 0");
  expect_error_naming([] { BlockManager(4, 0, true); }, "block_size must be positive, got 0");
  bm.check_invariants();
}

TEST(BlockManager, CommonPrefixSharesExactlyTheCommonFullBlocks) {
  const int64_t bs = 4;
  BlockManager bm(33, bs, true);
  const auto a = iota_tokens(14, 0);  // 3 full blocks and 2 tokens
  EXPECT_EQ(prefill(bm, 0, a), 0);
  EXPECT_EQ(bm.stats().prefix_queries, 3);
  EXPECT_EQ(bm.stats().prefix_hits, 0);

  // Agrees with a on tokens [0, 10): blocks 0 and 1 are common, block 2 differs at token 10.
  auto b = iota_tokens(17, 0);
  b[10] = 999;
  EXPECT_EQ(bm.cached_prefix(b), 8);
  EXPECT_EQ(bm.blocks_needed_to_begin(b, 17), 3);  // 5 blocks, 2 of them reused and referenced
  EXPECT_EQ(prefill(bm, 1, b), 8);
  const auto& ta = bm.block_table(0);
  const auto& tb = bm.block_table(1);
  EXPECT_EQ(tb[0], ta[0]);
  EXPECT_EQ(tb[1], ta[1]);
  for (size_t i = 2; i < tb.size(); ++i) {
    for (BlockId x : ta) EXPECT_NE(tb[i], x) << "block " << i << " of b";
  }
  EXPECT_EQ(bm.stats().prefix_queries, 3 + 4);
  EXPECT_EQ(bm.stats().prefix_hits, 2);
  EXPECT_EQ(bm.stats().used, 4 + 3);

  // The same prompt as a: its partial last block (tokens 12, 13) is never shared.
  EXPECT_EQ(prefill(bm, 2, a), 12);
  EXPECT_EQ(bm.block_table(2)[2], ta[2]);
  EXPECT_NE(bm.block_table(2)[3], ta[3]);
  // A prompt of whole blocks leaves its last block to compute, so logits exist.
  EXPECT_EQ(prefill(bm, 3, iota_tokens(12, 0)), 8);
  EXPECT_EQ(bm.stats().prefix_hits, 2 + 3 + 2);
  bm.check_invariants();

  // After everyone leaves, the full computed blocks stay cached and the partial ones are free.
  for (int64_t seq = 0; seq < 4; ++seq) bm.free_sequence(seq);
  bm.check_invariants();
  const auto st = bm.stats();
  EXPECT_EQ(st.used, 0);
  // a's 3 blocks and b's 2 own full ones; seq 3's recomputed block 2 duplicated a's: not cached.
  EXPECT_EQ(st.cached, 3 + 2);
  EXPECT_EQ(st.free, 33 - st.cached);
  EXPECT_EQ(bm.cached_prefix(a), 12);
}

TEST(BlockManager, OnlyComputedBlocksAreCachedAndCachingOffSharesNothing) {
  BlockManager bm(13, 3, true);
  const auto t = iota_tokens(10, 7);
  bm.begin_sequence(0, t);
  Copies copies;
  ASSERT_TRUE(bm.append_slots(0, 10, copies));
  bm.mark_computed(0, t, 5);  // chunked prefill: one full block computed so far
  EXPECT_EQ(bm.cached_prefix(t), 3);
  bm.mark_computed(0, t, 9);
  EXPECT_EQ(bm.cached_prefix(t), 9);

  BlockManager off(13, 3, false);
  EXPECT_EQ(prefill(off, 0, t), 0);
  EXPECT_EQ(prefill(off, 1, t), 0);
  EXPECT_EQ(off.stats().prefix_queries, 0);
  off.free_sequence(0);
  EXPECT_EQ(off.stats().cached, 0);
  off.check_invariants();
}

TEST(BlockManager, ForkCopiesTheSharedPartialBlockOnFirstWrite) {
  const int64_t bs = 4;
  BlockManager bm(13, bs, true);
  prefill(bm, 0, iota_tokens(6, 0));  // [full, partial (2 of 4)]
  bm.fork(0, 1);
  bm.fork(0, 2);
  EXPECT_EQ(bm.block_table(1), bm.block_table(0));
  EXPECT_EQ(bm.length(2), 6);
  EXPECT_EQ(bm.stats().used, 2);
  const std::vector<BlockId> shared = bm.block_table(0);

  Copies copies;
  EXPECT_EQ(bm.blocks_needed(1, 1), 1);  // the copy
  EXPECT_EQ(bm.blocks_needed(1, 3), 2);  // the copy and one new block
  ASSERT_TRUE(bm.append_slots(1, 1, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, shared[1]);
  const BlockId copy1 = copies[0].second;
  EXPECT_EQ(bm.block_table(1), (std::vector<BlockId>{shared[0], copy1}));
  EXPECT_EQ(bm.slot(1, 6), copy1 * bs + 2);
  EXPECT_EQ(bm.slot(1, 3), shared[0] * bs + 3);  // the full block stays shared

  ASSERT_TRUE(bm.append_slots(2, 1, copies));  // the block is still shared by 0 and 2
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[1].first, shared[1]);
  EXPECT_NE(copies[1].second, copy1);
  EXPECT_EQ(bm.blocks_needed(0, 1), 0);  // 0 is the last user: it writes in place
  ASSERT_TRUE(bm.append_slots(0, 1, copies));
  EXPECT_EQ(copies.size(), 2u);
  EXPECT_EQ(bm.block_table(0), shared);
  bm.check_invariants();

  // Forked at a block boundary: nothing to copy, each gets a fresh block.
  ASSERT_TRUE(bm.append_slots(0, 1, copies));  // length 8
  bm.fork(0, 3);
  ASSERT_TRUE(bm.append_slots(3, 1, copies));
  ASSERT_TRUE(bm.append_slots(0, 1, copies));
  EXPECT_EQ(copies.size(), 2u);
  EXPECT_NE(bm.block_table(3)[2], bm.block_table(0)[2]);
  EXPECT_EQ(bm.block_table(3)[1], bm.block_table(0)[1]);
  for (int64_t seq = 0; seq < 4; ++seq) bm.free_sequence(seq);
  bm.check_invariants();
  EXPECT_EQ(bm.stats().used, 0);
}

TEST(BlockManager, CopyOnWriteIsRefusedWhenThePoolIsFull) {
  BlockManager bm(2, 4, false);
  prefill(bm, 0, iota_tokens(6, 0));
  bm.fork(0, 1);
  Copies copies;
  EXPECT_EQ(bm.free_blocks(), 0);
  EXPECT_FALSE(bm.append_slots(1, 1, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(bm.block_table(1), bm.block_table(0));
  bm.free_sequence(1);
  EXPECT_TRUE(bm.append_slots(0, 2, copies));  // now the only user
  EXPECT_TRUE(copies.empty());
  bm.check_invariants();
}

}  // namespace
}  // namespace tessel::serve
