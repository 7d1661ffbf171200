// SPDX-License-Identifier: Apache-2.0
// A Rowwise Linear converted to int8 on thread worlds of 2, 3 and 4 ranks equals one process's
// int8 Linear when its split cuts the 32-column activation blocks (int8_row_blocks.h): the
// geometry of the padded slices, the product for input widths 13 to 200 (a tail only, one block
// over three ranks, several shared blocks, a split on a multiple of 32), the collectives (one more
// all-reduce of the shared blocks' maxima only where a split cuts a block), and the refusal of an
// unpadded piece.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "parallel_test_util.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/dist/record.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/nn/nn.h"
#include "tessel/nn/quantized.h"
#include "tessel/parallel/tensor/int8_row_blocks.h"
#include "tessel/parallel/tensor/tensor_parallel.h"

namespace tessel::parallel {
namespace {

using namespace test_util;
using kernels::quant::QuantType;

constexpr int64_t kOut = 7, kRows = 5;
// One process's product against the ranks' sum: the same integer codes and scales, summed in
// another f32 order (about 1e-7 relative). Rounding an activation in other blocks moves the
// output by about 1e-3 relative (measured 2e-3 to 1e-2 before the blocks were aligned).
constexpr double kTol = 1e-5;

std::shared_ptr<nn::Linear> make_linear(int64_t in) {
  Generator g(uint64_t(29 + in));
  return std::make_shared<nn::Linear>(in, kOut, true, nn::Init::normal(&g, 0.3));
}

// Rows of different scales, one of zeros (a block whose maximum is 0).
Tensor make_input(int64_t in) {
  Generator g(uint64_t(71 + in));
  Tensor x = randn({kRows, in}, DType::F32, &g);
  float* p = x.data<float>();
  for (int64_t c = 0; c < in; ++c) {
    p[1 * in + c] *= 40.0f;
    p[3 * in + c] = 0.0f;
  }
  return x;
}

std::vector<double> one_process(int64_t in, const Tensor& x) {
  autograd::NoGradGuard no_grad;
  auto l = make_linear(in);
  l->eval();
  l->set_quantized(QuantType::Int8, nn::quantize_matrix(l->weight, QuantType::Int8));
  return l->forward(x).to_vector<double>();
}

// This rank's Rowwise piece converted as train::convert_inference_weights_tp converts it: padded
// where its split cuts a block, then quantized with the whole rows' maxima.
void convert_piece(nn::Linear& l, dist::Communicator& tp, bool pad) {
  if (pad) pad_rowwise_int8(l, tp);
  std::vector<float> own = nn::row_abs_max(l.weight);
  Tensor amax = from_data(own, Shape({int64_t(own.size())}));
  tp.all_reduce(amax, dist::ReduceOp::Max);
  l.set_quantized(QuantType::Int8,
                  nn::quantize_matrix(l.weight, QuantType::Int8, amax.to_vector<float>()));
}

TEST(Int8RowSlice, PadsToTheWholeRowsBlocks) {
  // 104 over 2: 52 / 52; block 1 (columns 32-63) shared, 96-103 the f32 tail.
  Int8RowSlice a = int8_row_slice(104, 2, 0), b = int8_row_slice(104, 2, 1);
  EXPECT_EQ(a.shared, std::vector<int64_t>({1}));
  EXPECT_EQ(b.shared, a.shared);
  EXPECT_EQ(a.lead, 0);
  EXPECT_EQ(a.trail, 12);
  EXPECT_EQ(a.padded(), 64);
  EXPECT_EQ(b.offset, 52);
  EXPECT_EQ(b.lead, 20);
  EXPECT_EQ(b.trail, 0);
  EXPECT_EQ(b.padded(), 72);
  // 39 over 3: 13 / 13 / 13, block 0 over all three ranks; the middle rank pads both sides.
  Int8RowSlice m = int8_row_slice(39, 3, 1), e = int8_row_slice(39, 3, 2);
  EXPECT_EQ(m.shared, std::vector<int64_t>({0}));
  EXPECT_EQ(m.lead, 13);
  EXPECT_EQ(m.trail, 6);
  EXPECT_EQ(m.padded(), 32);
  EXPECT_EQ(e.lead, 26);
  EXPECT_EQ(e.trail, 0);
  // Splits on multiples of 32, and a row shorter than a block: nothing shared, nothing padded.
  for (auto [in, n] : {std::pair<int64_t, int>{128, 4}, {64, 2}, {13, 3}, {31, 2}}) {
    for (int r = 0; r < n; ++r) {
      Int8RowSlice s = int8_row_slice(in, n, r);
      EXPECT_TRUE(s.aligned()) << in << " over " << n;
      EXPECT_EQ(s.padded(), s.len) << in << " over " << n << " rank " << r;
    }
  }
}

class Int8RowwiseWorld : public ::testing::TestWithParam<int> {};

TEST_P(Int8RowwiseWorld, EqualsOneProcess) {
  const int n = GetParam();
  for (int64_t in : {13, 39, 91, 104, 128, 200}) {
    const Tensor x = make_input(in);
    const std::vector<double> want = one_process(in, x);
    Checks checks;
    run_world(n, [&](dist::CommPtr tp) {
      autograd::NoGradGuard no_grad;  // int8 layers are inference-only
      const std::string at = "in " + std::to_string(in) + " tp " + std::to_string(n) + " rank " +
                             std::to_string(tp->rank());
      auto l = make_linear(in);
      l->eval();
      parallelize_rowwise(*l, tp, /*input_is_sharded=*/false);
      const Int8RowSlice s = int8_row_slice(in, n, tp->rank());
      convert_piece(*l, *tp, true);
      checks.expect(l->weight.size(1) == kernels::quant::row_bytes(QuantType::Int8, s.padded()),
                    at + ": piece of " + std::to_string(l->weight.size(1)) + " bytes per row");
      const uint64_t before = tp->context().issued_count();
      const std::vector<double> got = l->forward(x).to_vector<double>();
      const uint64_t calls = tp->context().issued_count() - before;
      checks.expect(calls == (s.aligned() ? 1u : 2u),
                    at + ": forward issued " + std::to_string(calls) + " collectives");
      const double err = rel_err(got, want);
      checks.expect(err <= kTol, at + ": relative error " + std::to_string(err));
    });
    checks.verify();
  }
}

// A piece converted without its padding is refused where its split cuts a block (91 over 2:
// both ranks pad, so both refuse before any collective).
TEST(Int8Rowwise, UnpaddedPieceRefused) {
  Checks checks;
  run_world(2, [&](dist::CommPtr tp) {
    autograd::NoGradGuard no_grad;
    auto l = make_linear(91);
    l->eval();
    parallelize_rowwise(*l, tp, /*input_is_sharded=*/false);
    convert_piece(*l, *tp, false);
    std::string message;
    try {
      l->forward(make_input(91));
    } catch (const Error& e) {
      message = e.what();
    }
    checks.expect(message.find("must be padded to") != std::string::npos,
                  "rank " + std::to_string(tp->rank()) + ": '" + message + "'");
  });
  checks.verify();
}

INSTANTIATE_TEST_SUITE_P(Ranks, Int8RowwiseWorld, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace tessel::parallel
