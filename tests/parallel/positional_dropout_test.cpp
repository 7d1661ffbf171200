// SPDX-License-Identifier: Apache-2.0
// Positional (layout-invariant) dropout against one process: a positional draw takes each element
// from (seed, the generator's offset as step and micro-batch key, site, the element's index in
// the step's one-process tensor).
// Data-parallel parts of dim 0 (2 and 3 ranks, uneven batch 6 x sequence 13 x features 7),
// composed with sequence pieces, reassemble the one-process output and input gradient bitwise;
// a site's mask does not depend on what was drawn before it (pipeline stages draw only their
// sites) and the generator does not move (recomputation replays it); keys and sites separate
// the streams; micro-batches of the step's rows draw one micro-batch's masks; a dim-0 piece under
// dim-0 parts is an Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tessel/autograd/engine.h"
#include "tessel/core/error.h"
#include "tessel/core/positional_draws.h"
#include "tessel/core/rng.h"
#include "tessel/ops/ops.h"

namespace tessel::parallel {
namespace {

constexpr int64_t kBatch = 6, kSeq = 13, kDim = 7;
constexpr double kP = 0.3;
constexpr uint64_t kSeed = 21, kKey = (uint64_t(5) << 32) | 3;  // step 5, micro-batch 3
const uint64_t kSite = site_id("h.1.mlp.dropout");

Tensor input(uint64_t seed) {
  Generator g(seed);
  return randn({kBatch, kSeq, kDim}, DType::F32, &g);
}

Generator keyed(uint64_t key = kKey) {
  Generator g(kSeed);
  g.set_state(kSeed, key);
  return g;
}

struct Result {
  Tensor y, dx;
};

// Positional dropout (or dropout_piece along the sequence) of x as part `part` of `parts`,
// forward and backward with upstream dy.
Result run(const Tensor& x0, const Tensor& dy, Generator& g, const ops::DropoutPiece* piece,
           int64_t part, int64_t parts) {
  const PositionalDraw draw{kSite, part, parts};
  Tensor x = x0.clone().set_requires_grad();
  Tensor y = piece ? ops::dropout_piece(x, kP, *piece, true, &g, &draw)
                   : ops::dropout(x, kP, true, &g, &draw);
  autograd::backward({y}, {dy});
  return {y.detach(), x.grad()};
}

class PositionalParts : public ::testing::TestWithParam<int> {};

TEST_P(PositionalParts, ReassembleOneProcessBitwise) {
  const int parts = GetParam();
  const Tensor x = input(3), dy = input(4);
  Generator one = keyed();
  const Result want = run(x, dy, one, nullptr, 0, 1);
  EXPECT_EQ(one.offset(), kKey) << "a positional draw moved the generator";
  const int64_t rows = kBatch / parts;
  for (int64_t seq_pieces : {1, 2}) {  // dp alone, and dp x sp (pieces of 7 and 6)
    std::vector<Tensor> ys, dxs;
    for (int r = 0; r < parts; ++r) {
      const Tensor xr = x.slice(0, r * rows, (r + 1) * rows);
      const Tensor dyr = dy.slice(0, r * rows, (r + 1) * rows);
      std::vector<Tensor> yr, dxr;
      for (int64_t s = 0; s < seq_pieces; ++s) {
        const int64_t lo = s == 0 ? 0 : 7, hi = seq_pieces == 1 || s == 1 ? kSeq : 7;
        Generator g = keyed();
        const ops::DropoutPiece piece{1, lo, kSeq};
        const Result got = run(xr.slice(1, lo, hi), dyr.slice(1, lo, hi), g,
                               seq_pieces == 1 ? nullptr : &piece, r, parts);
        yr.push_back(got.y);
        dxr.push_back(got.dx);
      }
      ys.push_back(ops::concat(yr, 1));
      dxs.push_back(ops::concat(dxr, 1));
    }
    const std::string at =
        std::to_string(parts) + " parts, " + std::to_string(seq_pieces) + " sequence pieces";
    EXPECT_EQ(ops::concat(ys, 0).to_vector<float>(), want.y.to_vector<float>()) << at;
    EXPECT_EQ(ops::concat(dxs, 0).to_vector<float>(), want.dx.to_vector<float>()) << at;
  }
  // The mask really drops about p of the elements.
  const std::vector<float> y = want.y.to_vector<float>();
  const double zeros = double(std::count(y.begin(), y.end(), 0.0f)) / double(y.size());
  EXPECT_GT(zeros, 0.2);
  EXPECT_LT(zeros, 0.4);
}

INSTANTIATE_TEST_SUITE_P(Dp, PositionalParts, ::testing::Values(2, 3));

TEST(PositionalDropout, ASiteIgnoresEarlierDrawsAndTheKeyAndSiteSeparateStreams) {
  const Tensor x = input(3);
  const PositionalDraw at{kSite, 0, 1};
  Generator alone = keyed();
  const std::vector<float> want = ops::dropout(x, kP, true, &alone, &at).to_vector<float>();
  // A later pipeline stage: other sites drew first on one process, none on this rank.
  Generator after = keyed();
  const PositionalDraw embd{site_id("drop"), 0, 1}, mlp0{site_id("h.0.mlp.dropout"), 0, 1};
  ops::dropout(x, 0.5, true, &after, &embd);
  ops::dropout(x, kP, true, &after, &mlp0);
  EXPECT_EQ(ops::dropout(x, kP, true, &after, &at).to_vector<float>(), want);
  EXPECT_EQ(after.offset(), kKey) << "a positional draw moved the generator";
  EXPECT_NE(ops::dropout(x, kP, true, &after, &mlp0).to_vector<float>(), want);  // another site
  Generator next = keyed(kKey + 1);  // another micro-batch
  EXPECT_NE(ops::dropout(x, kP, true, &next, &at).to_vector<float>(), want);
  // Without a positional draw: the running stream, which advances.
  Generator running = keyed();
  EXPECT_NE(ops::dropout(x, kP, true, &running).to_vector<float>(), want);
  EXPECT_EQ(running.offset(), kKey + uint64_t(x.numel()));
}

// The step's rows cut into micro-batches (one process accumulating them, as the expert-parallel
// tests compare: micro-batches of 2 rows or of 1) and into dp parts of micro-batches (3 x 2 rows
// over 2 parts) draw the masks of one micro-batch of all 6 rows: a row's mask follows its place
// in the step, not the cut (micro-batch m's rows follow micro-batch m - 1's).
TEST(PositionalDropout, MicroBatchesOfTheStepsRowsDrawOneMicroBatchsMasks) {
  const Tensor x = input(3), dy = input(4);
  const uint64_t step = uint64_t(5) << 32;
  Generator one = keyed(step);
  const Result want = run(x, dy, one, nullptr, 0, 1);
  for (const auto& [micro, parts] :
       std::vector<std::pair<int64_t, int64_t>>{{3, 1}, {6, 1}, {3, 2}}) {
    const int64_t rows = kBatch / (micro * parts);
    std::vector<Tensor> ys, dxs;
    for (int64_t m = 0; m < micro; ++m)
      for (int64_t r = 0; r < parts; ++r) {
        const int64_t lo = (m * parts + r) * rows;
        Generator g = keyed(step | uint64_t(m));
        const Result got =
            run(x.slice(0, lo, lo + rows), dy.slice(0, lo, lo + rows), g, nullptr, r, parts);
        ys.push_back(got.y);
        dxs.push_back(got.dx);
      }
    const std::string at = std::to_string(micro) + " micro-batches of " + std::to_string(parts) +
                           " parts of " + std::to_string(rows) + " rows";
    EXPECT_EQ(ops::concat(ys, 0).to_vector<float>(), want.y.to_vector<float>()) << at;
    EXPECT_EQ(ops::concat(dxs, 0).to_vector<float>(), want.dx.to_vector<float>()) << at;
  }
}

TEST(PositionalDropout, RejectsADim0PieceUnderDim0PartsAndBadParts) {
  const Tensor x = input(3).slice(0, 0, 3);
  Generator g = keyed();
  const PositionalDraw half{kSite, 1, 2}, beyond{kSite, 2, 2};
  EXPECT_THROW(ops::dropout_piece(x, kP, ops::DropoutPiece{0, 3, kBatch}, true, &g, &half), Error);
  EXPECT_THROW(ops::dropout(x, kP, true, &g, &beyond), Error);
  EXPECT_EQ(g.offset(), kKey);
}

}  // namespace
}  // namespace tessel::parallel
