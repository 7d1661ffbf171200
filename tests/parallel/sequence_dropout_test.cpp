// SPDX-License-Identifier: Apache-2.0
// Sequence-parallel dropout against one process: on thread worlds of 2 and 3 ranks (uneven pieces
// of a 13-long sequence, batch 3, features 7), two Sequence-style dropouts in a row gather to
// exactly (bitwise) one process's output and input gradient, and every rank's generator ends
// where one process's does. ops::dropout_piece alone: pieces along any dim reassemble the full
// mask, and a piece that does not fit is an Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "parallel_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"
#include "tessel/parallel/tensor/sequence_parallel.h"
#include "tessel/sharding/placement.h"
#include "tessel/sharding/regions.h"

namespace tessel::parallel {
namespace {

using namespace test_util;

constexpr int64_t kBatch = 3, kSeq = 13, kDim = 7;
constexpr double kP1 = 0.3, kP2 = 0.45;
constexpr uint64_t kSeed = 21, kStartOffset = 5;  // an odd offset: runs straddle Philox blocks

struct Result {
  std::vector<float> y, dx;
  uint64_t offset = 0;
};

Tensor input() {
  Generator g(3);
  return randn({kBatch, kSeq, kDim}, DType::F32, &g);
}

Tensor upstream() {
  Generator g(4);
  return randn({kBatch, kSeq, kDim}, DType::F32, &g);
}

// Two dropouts drawing from one generator, forward and backward on x.
Result run_pair(nn::Dropout& d1, nn::Dropout& d2, Generator& g, const Tensor& x0,
                const Tensor& dy) {
  Tensor x = x0.clone().set_requires_grad();
  Tensor y = d2.forward(d1.forward(x));
  autograd::backward({y}, {dy});
  return {y.to_vector<float>(), x.grad().to_vector<float>(), g.offset()};
}

Result one_process() {
  Generator g(kSeed);
  g.set_state(kSeed, kStartOffset);
  nn::Dropout d1(kP1, &g), d2(kP2, &g);
  return run_pair(d1, d2, g, input(), upstream());
}

class SequenceDropoutWorld : public ::testing::TestWithParam<int> {};

TEST_P(SequenceDropoutWorld, GathersToOneProcessBitwise) {
  const int n = GetParam();
  const Result want = one_process();
  Checks checks;
  run_world(n, [&](dist::CommPtr tp) {
    const std::string at = "tp " + std::to_string(n) + " rank " + std::to_string(tp->rank());
    Generator g(kSeed);
    g.set_state(kSeed, kStartOffset);
    nn::Dropout d1(kP1, &g), d2(kP2, &g);
    TpOptions o;
    o.sequence_parallel = true;
    o.sequence = std::make_shared<SequenceState>();
    o.sequence->length = kSeq;
    parallelize_sequence(d1, tp, o);
    parallelize_sequence(d2, tp, o);
    const int64_t off = sharding::shard_offset(kSeq, n, tp->rank());
    const int64_t size = sharding::shard_size(kSeq, n, tp->rank());
    const Tensor x = input().slice(1, off, off + size);
    const Tensor dy = upstream().slice(1, off, off + size);
    Result got = run_pair(d1, d2, g, x, dy);
    const Shape piece{kBatch, size, kDim};
    const Tensor y_full = sharding::gather_from_region(from_data(got.y, piece), *tp, 1, kSeq);
    const Tensor dx_full = sharding::gather_from_region(from_data(got.dx, piece), *tp, 1, kSeq);
    checks.expect(y_full.to_vector<float>() == want.y, at + ": gathered output differs");
    checks.expect(dx_full.to_vector<float>() == want.dx, at + ": gathered gradient differs");
    checks.expect(got.offset == want.offset, at + ": generator at " + std::to_string(got.offset) +
                                                 ", one process at " + std::to_string(want.offset));
    // Paused (incremental decoding) the dropout is the plain one on whatever arrives.
    o.sequence->active = false;
    d1.eval();
    Tensor same = d1.forward(x);
    checks.expect(same.data_ptr() == x.data_ptr(), at + ": eval dropout is not the identity");
  });
  checks.verify();
  // The masks really drop something, differently along the sequence.
  size_t zeros = 0;
  for (float v : want.y) zeros += v == 0.0f;
  EXPECT_GT(zeros, want.y.size() / 4);
  EXPECT_LT(zeros, want.y.size());
}

INSTANTIATE_TEST_SUITE_P(Tp, SequenceDropoutWorld, ::testing::Values(2, 3));

TEST(DropoutPiece, PiecesAlongAnyDimReassembleTheFullMask) {
  const Tensor x = input();
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t len = x.size(dim);
    Generator whole(kSeed);
    const std::vector<float> want = ops::dropout(x, kP1, true, &whole).to_vector<float>();
    std::vector<Tensor> parts;
    Generator g(kSeed);
    for (int64_t start = 0; start < len;) {
      const int64_t end = std::min(len, start + 2);  // pieces of 2 and a last one of 1
      g.set_state(kSeed, 0);
      const ops::DropoutPiece piece{dim, start, len};
      parts.push_back(ops::dropout_piece(x.slice(dim, start, end), kP1, piece, true, &g));
      EXPECT_EQ(g.offset(), whole.offset()) << "dim " << dim << " start " << start;
      start = end;
    }
    EXPECT_EQ(ops::concat(parts, dim).to_vector<float>(), want) << "dim " << dim;
  }
}

TEST(DropoutPiece, RejectsAPieceOutsideTheFullLength) {
  const Tensor x = input().slice(1, 0, 5);
  Generator g(1);
  try {
    ops::dropout_piece(x, kP1, ops::DropoutPiece{1, 9, kSeq}, true, &g);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[9, 14)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g.offset(), 0u);
}

}  // namespace
}  // namespace tessel::parallel
