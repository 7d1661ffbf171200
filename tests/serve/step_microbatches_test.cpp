// SPDX-License-Identifier: Apache-2.0
// Cutting an engine step into micro-batches of whole sequences (serve/step_microbatches.h): the
// pieces partition the sequences in order, each carries exactly its tokens, tables and rows (made
// local), the cut follows the token shares, and one piece or one sequence leaves the step whole.
#include "tessel/serve/step_microbatches.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessel::serve {
namespace {

std::vector<int64_t> i64(const Tensor& t) {
  return t.to_vector<int64_t>();
}

// Sequences of `lens` new tokens each (token i's id 100 + i, slot 1000 + i), table row s filled
// with s, the last token of every other sequence sampled.
StepTensors make_step(const std::vector<int64_t>& lens) {
  StepTensors t;
  std::vector<int64_t> ids, positions, slots, seq_lens, starts{0}, rows;
  const int64_t width = 3;
  std::vector<int32_t> tables;
  int64_t n = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int64_t j = 0; j < lens[s]; ++j, ++n) {
      ids.push_back(100 + n);
      positions.push_back(7 + j);
      slots.push_back(1000 + n);
    }
    seq_lens.push_back(7 + lens[s]);
    starts.push_back(n);
    if (s % 2 == 0) rows.push_back(n - 1);
    for (int64_t w = 0; w < width; ++w) tables.push_back(int32_t(s));
  }
  const int64_t seqs = int64_t(lens.size());
  t.ids = from_data(ids, Shape{1, n});
  t.positions = from_data(positions, Shape{1, n});
  t.slots = from_data(slots, Shape{n});
  t.block_tables = from_data(tables, Shape{seqs, width});
  t.seq_lens = from_data(seq_lens, Shape{seqs});
  t.query_starts = from_data(starts, Shape{seqs + 1});
  t.rows = from_data(rows, Shape{int64_t(rows.size())});
  return t;
}

TEST(StepMicrobatches, PiecesPartitionTheStep) {
  const std::vector<int64_t> lens{7, 1, 1, 13, 1, 5, 1};
  const StepTensors step = make_step(lens);
  for (int parts : {2, 3, 4, 7, 33}) {
    SCOPED_TRACE(parts);
    const std::vector<StepTensors> pieces = split_step(step, parts);
    ASSERT_EQ(int64_t(pieces.size()), std::min<int64_t>(parts, 7));
    std::vector<int64_t> ids, slots, positions, seq_lens, rows, table_rows;
    int64_t offset = 0;
    for (const StepTensors& p : pieces) {
      const int64_t n = p.ids.size(1), seqs = p.seq_lens.numel();
      ASSERT_GE(seqs, 1);
      const std::vector<int64_t> starts = i64(p.query_starts);
      EXPECT_EQ(starts.front(), 0);
      EXPECT_EQ(starts.back(), n);
      EXPECT_EQ(p.block_tables.size(0), seqs);
      for (int64_t v : i64(p.ids)) ids.push_back(v);
      for (int64_t v : i64(p.slots)) slots.push_back(v);
      for (int64_t v : i64(p.positions)) positions.push_back(v);
      for (int64_t v : i64(p.seq_lens)) seq_lens.push_back(v);
      for (int64_t r : i64(p.rows)) {
        EXPECT_LT(r, n);
        rows.push_back(r + offset);
      }
      for (int32_t v : p.block_tables.to_vector<int32_t>()) table_rows.push_back(v);
      offset += n;
    }
    EXPECT_EQ(ids, i64(step.ids));
    EXPECT_EQ(slots, i64(step.slots));
    EXPECT_EQ(positions, i64(step.positions));
    EXPECT_EQ(seq_lens, i64(step.seq_lens));
    EXPECT_EQ(rows, i64(step.rows));
    std::vector<int64_t> want_tables;
    for (int32_t v : step.block_tables.to_vector<int32_t>()) want_tables.push_back(v);
    EXPECT_EQ(table_rows, want_tables);
  }
}

TEST(StepMicrobatches, CutsFollowTheTokenShares) {
  // 29 tokens in two pieces: the first boundary at or past 14 tokens is after sequence 3 (22).
  const std::vector<StepTensors> two = split_step(make_step({7, 1, 1, 13, 1, 5, 1}), 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].seq_lens.numel(), 4);
  EXPECT_EQ(two[1].ids.size(1), 7);
  // Decode steps of 33 one-token sequences in 4 pieces: cuts at tokens 8, 16 and 24.
  const std::vector<StepTensors> four = split_step(make_step(std::vector<int64_t>(33, 1)), 4);
  std::vector<int64_t> sizes;
  for (const StepTensors& p : four) sizes.push_back(p.seq_lens.numel());
  EXPECT_EQ(sizes, (std::vector<int64_t>{8, 8, 8, 9}));
}

TEST(StepMicrobatches, OnePieceOrOneSequenceIsTheStep) {
  const StepTensors step = make_step({13});
  const std::vector<StepTensors> one = split_step(step, 3);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(i64(one[0].ids), i64(step.ids));
  EXPECT_EQ(split_step(make_step({7, 1}), 1).size(), 1u);
  EXPECT_THROW(split_step(step, 0), Error);
}

}  // namespace
}  // namespace tessel::serve
