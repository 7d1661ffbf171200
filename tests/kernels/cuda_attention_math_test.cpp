// SPDX-License-Identifier: Apache-2.0
// The index arithmetic of the CUDA attention kernels (kernels/cuda/attention/attention_math.h),
// checked on the CPU where no GPU is needed: the visibility rule against the reference backend's
// definition, the key range a block of query rows visits, the paged positions and sequence
// lookup, and the m16n8k16 / ldmatrix fragment layouts the tensor-core kernel relies on.
#include <gtest/gtest.h>

#include <array>
#include <set>
#include <utility>
#include <vector>

#include "tessel/kernels/cuda/attention/attention_math.h"

namespace tessel::kernels::cuda {
namespace {

// reference/attention.cpp's rule, verbatim in meaning.
bool reference_sees(int64_t tq, int64_t tk, bool causal, int64_t window, int64_t i, int64_t j) {
  int64_t p = i + tk - tq;
  return !causal || (j <= p && (window == 0 || j > p - window));
}

struct Case {
  int64_t tq, tk;
  bool causal;
  int64_t window;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t tq : {1, 7, 13, 33, 70, 130})
    for (int64_t tk : {0, 1, 7, 13, 33, 70, 130, 257}) {
      out.push_back({tq, tk, false, 0});
      for (int64_t w : {0, 1, 5, 16, 64, 300}) out.push_back({tq, tk, true, w});
    }
  return out;
}

TEST(CudaAttentionMath, VisibilityMatchesTheReferenceRule) {
  for (const Case& c : cases()) {
    Visibility v = Visibility::make(c.tq, c.tk, c.causal, c.window);
    for (int64_t i = 0; i < c.tq; ++i)
      for (int64_t j = 0; j < c.tk; ++j)
        ASSERT_EQ(v.sees(i, j), reference_sees(c.tq, c.tk, c.causal, c.window, i, j))
            << "tq " << c.tq << " tk " << c.tk << " causal " << c.causal << " window " << c.window
            << " i " << i << " j " << j;
  }
}

TEST(CudaAttentionMath, QueryRangeOfAKeyIsExactlyItsViewers) {
  for (const Case& c : cases()) {
    Visibility v = Visibility::make(c.tq, c.tk, c.causal, c.window);
    for (int64_t j = 0; j < c.tk; ++j)
      for (int64_t i = 0; i < c.tq; ++i) {
        bool in_range = i >= v.query_begin(j) && i < v.query_end(j);
        ASSERT_EQ(in_range, v.sees(i, j)) << "tq " << c.tq << " tk " << c.tk << " window "
                                          << c.window << " i " << i << " j " << j;
      }
  }
}

TEST(CudaAttentionMath, KeyRangeOfABlockHoldsEveryVisibleKey) {
  for (const Case& c : cases())
    for (int64_t rows : {16, 64})
      for (int64_t tile : {32, 64}) {
        Visibility v = Visibility::make(c.tq, c.tk, c.causal, c.window);
        for (int64_t q0 = 0; q0 < c.tq; q0 += rows) {
          KeyRange r = key_range(v, q0, rows, tile);
          ASSERT_EQ(r.begin % tile, 0);
          ASSERT_LE(r.end, c.tk);
          for (int64_t i = q0; i < std::min(q0 + rows, c.tq); ++i)
            for (int64_t j = 0; j < c.tk; ++j) {
              if (!v.sees(i, j)) continue;
              ASSERT_TRUE(j >= r.begin && j < r.end)
                  << "tq " << c.tq << " tk " << c.tk << " window " << c.window << " q0 " << q0
                  << " key " << j << " outside [" << r.begin << ", " << r.end << ")";
            }
        }
      }
}

TEST(CudaAttentionMath, WholeTileMeansEveryRowSeesEveryKey) {
  int64_t whole_tiles = 0;
  for (const Case& c : cases()) {
    Visibility v = Visibility::make(c.tq, c.tk, c.causal, c.window);
    for (int64_t row0 = 0; row0 < c.tq; row0 += 16)
      for (int64_t j0 = 0; j0 < c.tk; j0 += 16) {
        if (!block_sees_whole_tile(v, row0, 16, j0, 16)) continue;
        ++whole_tiles;
        for (int64_t i = row0; i < std::min(row0 + 16, c.tq); ++i)
          for (int64_t j = j0; j < j0 + 16; ++j)
            ASSERT_TRUE(j < c.tk && v.sees(i, j)) << "tq " << c.tq << " tk " << c.tk << " window "
                                                  << c.window << " i " << i << " j " << j;
      }
  }
  EXPECT_GT(whole_tiles, 100);
}

TEST(CudaAttentionMath, PagedPositionsAndSlots) {
  // A sequence of 10 keys, 3 new rows: rows sit at 7, 8, 9.
  EXPECT_EQ(paged_position(10, 3, 0), 7);
  EXPECT_EQ(paged_position(10, 3, 2), 9);
  EXPECT_EQ(paged_first(9, 0), 0);
  EXPECT_EQ(paged_first(9, 4), 6);  // keys 6..9: four of them
  EXPECT_EQ(paged_first(2, 4), 0);
  const int32_t table[] = {5, 2, 9};
  EXPECT_EQ(paged_slot(table, 4, 0), 20);
  EXPECT_EQ(paged_slot(table, 4, 5), 9);
  EXPECT_EQ(paged_slot(table, 4, 11), 39);
}

TEST(CudaAttentionMath, SequenceOfRowSkipsEmptySequences) {
  const std::vector<int64_t> starts = {0, 0, 3, 3, 3, 4, 9, 9};
  const int64_t sequences = int64_t(starts.size()) - 1;
  for (int64_t row = 0; row < starts.back(); ++row) {
    int64_t want = -1;
    for (int64_t s = 0; s < sequences; ++s)
      if (starts[size_t(s)] <= row && row < starts[size_t(s + 1)]) want = s;
    EXPECT_EQ(sequence_of_row(starts.data(), sequences, row), want) << "row " << row;
  }
}

// Every element of the 16 x 16 A tile, the 16 x 8 B tile and the 16 x 8 C tile is held by
// exactly one (lane, register, half).
TEST(CudaAttentionMath, MmaFragmentsCoverTheirTilesOnce) {
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int half = 0; half < 2; ++half)
        EXPECT_TRUE(a.insert({mma_a_row(lane, r), mma_a_col(lane, r) + half}).second);
    for (int r = 0; r < 2; ++r)
      for (int half = 0; half < 2; ++half)
        EXPECT_TRUE(b.insert({mma_b_k(lane, r) + half, mma_b_n(lane)}).second);
    for (int e = 0; e < 4; ++e)
      EXPECT_TRUE(c.insert({mma_c_row(lane, e), mma_c_col(lane, e)}).second);
  }
  EXPECT_EQ(a.size(), 256u);
  EXPECT_EQ(b.size(), 128u);
  EXPECT_EQ(c.size(), 128u);
  for (auto [row, col] : a) EXPECT_TRUE(row < 16 && col < 16);
  for (auto [k, n] : b) EXPECT_TRUE(k < 16 && n < 8);
}

// P's A register r of step kk holds the same (row, key) pair as the score accumulators it is
// packed from, so no shuffle is needed between S = Q K^T and O += P V.
TEST(CudaAttentionMath, ScoreAccumulatorsAreTheAOperandOfPV) {
  for (int lane = 0; lane < 32; ++lane)
    for (int kk = 0; kk < 4; ++kk)
      for (int r = 0; r < 4; ++r)
        for (int half = 0; half < 2; ++half) {
          int tile = p_tile_of_a_register(kk, r), e = p_element_of_a_register(r) + half;
          EXPECT_EQ(mma_c_row(lane, e), mma_a_row(lane, r));
          EXPECT_EQ(tile * 8 + mma_c_col(lane, e), kk * 16 + mma_a_col(lane, r) + half);
        }
}

// ldmatrix.x4.trans as the PTX ISA defines it: matrix m's row r comes from the address of lane
// 8 m + r, and lane l receives elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4) of matrix
// m in register m. With the kernel's row addresses this is the B fragment of V for two n-tiles.
TEST(CudaAttentionMath, LdmatrixTransLoadsTheBFragmentsOfV) {
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m)
      for (int half = 0; half < 2; ++half) {
        int src = 8 * m + 2 * (lane % 4) + half;  // the lane whose address gives this row
        int key = ldmatrix_v_key(src), dim = ldmatrix_v_dim(src) + lane / 4;
        int want_key = mma_b_k(lane, m & 1) + half, want_dim = 8 * (m >> 1) + mma_b_n(lane);
        EXPECT_EQ(key, want_key) << "lane " << lane << " matrix " << m;
        EXPECT_EQ(dim, want_dim) << "lane " << lane << " matrix " << m;
      }
}

}  // namespace
}  // namespace tessel::kernels::cuda
