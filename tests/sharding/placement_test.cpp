// SPDX-License-Identifier: Apache-2.0
// Placements: the uneven rule on odd sizes, text forms, local shapes on one and two axes.
#include "tessel/sharding/placement.h"

#include <gtest/gtest.h>

#include "tessel/core/error.h"

namespace tessel::sharding {
namespace {

TEST(Placement, UnevenRuleOnOddSizes) {
  for (int64_t n : {7, 13, 33}) {
    for (int k : {2, 3, 4}) {
      int64_t at = 0;
      for (int r = 0; r < k; ++r) {
        EXPECT_EQ(shard_offset(n, k, r), at) << n << " over " << k << " rank " << r;
        const int64_t s = shard_size(n, k, r);
        // Balanced, longer pieces first.
        EXPECT_EQ(s, r < n % k ? n / k + 1 : n / k) << n << " over " << k << " rank " << r;
        at += s;
      }
      EXPECT_EQ(at, n) << n << " over " << k;
    }
  }
  EXPECT_EQ(shard_sizes(7, 3), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(shard_sizes(13, 4), (std::vector<int64_t>{4, 3, 3, 3}));
  EXPECT_EQ(shard_sizes(33, 4), (std::vector<int64_t>{9, 8, 8, 8}));
  EXPECT_EQ(shard_sizes(7, 2), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(shard_sizes(13, 3), (std::vector<int64_t>{5, 4, 4}));
  EXPECT_EQ(shard_sizes(3, 4), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_THROW(shard_size(7, 3, 3), Error);
  EXPECT_THROW(shard_offset(7, 0, 0), Error);
}

TEST(Placement, TextForms) {
  EXPECT_EQ(Placement::replicate().str(), "R");
  EXPECT_EQ(Placement::partial().str(), "P");
  EXPECT_EQ(Placement::shard(0).str(), "S(0)");
  EXPECT_EQ(Placement::shard(12).str(), "S(12)");
  for (const char* s : {"R", "P", "S(0)", "S(3)"}) EXPECT_EQ(Placement::parse(s).str(), s);
  EXPECT_EQ(Placement::parse("S(1)"), Placement::shard(1));
  EXPECT_FALSE(Placement::shard(0) == Placement::shard(1));
  EXPECT_FALSE(Placement::replicate() == Placement::partial());
  for (const char* bad : {"", "S", "S()", "S(-1)", "S(1", "S(x)", "r", "RP"})
    EXPECT_THROW(Placement::parse(bad), Error) << bad;
  Placements p{Placement::shard(0), Placement::replicate()};
  EXPECT_EQ(str(p), "[S(0), R]");
}

TEST(Placement, LocalShapeOneAxis) {
  const Shape g{7, 13};
  const std::vector<int> mesh{3};
  EXPECT_EQ(local_shape(g, Placements{Placement::shard(1)}, mesh, std::vector<int>{2}),
            (Shape{7, 4}));
  EXPECT_EQ(local_shape(g, Placements{Placement::shard(0)}, mesh, std::vector<int>{0}),
            (Shape{3, 13}));
  EXPECT_EQ(local_shape(g, Placements{Placement::replicate()}, mesh, std::vector<int>{1}), g);
  EXPECT_EQ(local_shape(g, Placements{Placement::partial()}, mesh, std::vector<int>{1}), g);
  EXPECT_EQ(local_offset(g, Placements{Placement::shard(1)}, mesh, std::vector<int>{2}),
            (std::vector<int64_t>{0, 9}));
  EXPECT_THROW(local_shape(g, Placements{Placement::shard(2)}, mesh, std::vector<int>{0}), Error);
  EXPECT_THROW(local_shape(g, Placements{}, mesh, std::vector<int>{0}), Error);
}

TEST(Placement, LocalShapeTwoAxes) {
  const Shape g{13, 33};
  const std::vector<int> mesh{2, 3};
  const Placements two_dims{Placement::shard(0), Placement::shard(1)};
  EXPECT_EQ(local_shape(g, two_dims, mesh, std::vector<int>{1, 2}), (Shape{6, 11}));
  // The same dim over both axes: split by the first axis (7, 6), then each piece by the second.
  const Placements same_dim{Placement::shard(0), Placement::shard(0)};
  EXPECT_EQ(local_shape(g, same_dim, mesh, std::vector<int>{0, 0}), (Shape{3, 33}));
  EXPECT_EQ(local_shape(g, same_dim, mesh, std::vector<int>{1, 2}), (Shape{2, 33}));
  EXPECT_EQ(local_offset(g, same_dim, mesh, std::vector<int>{1, 2}), (std::vector<int64_t>{11, 0}));
  int64_t rows = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b) rows += local_shape(g, same_dim, mesh, std::vector<int>{a, b})[0];
  EXPECT_EQ(rows, 13);
}

}  // namespace
}  // namespace tessel::sharding
