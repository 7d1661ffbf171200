// SPDX-License-Identifier: Apache-2.0
// The layers against plain double loops on odd sizes, and bad inputs. (GPT-2's block has its own
// tests beside the model, tests/models/gpt2_block_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/tolerance.h"
#include "tessel/autograd/autograd.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"

namespace tessel::nn {
namespace {

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

TEST(Layers, LinearIsXTimesWeightTransposedPlusBias) {
  Generator g(5);
  Linear fc(13, 7, true, Init::normal(&g, 0.5));
  fc.bias.copy_from(randn({7}, DType::F32, &g));
  EXPECT_EQ(fc.weight.shape(), (Shape{7, 13}));
  Tensor x = randn({3, 13}, DType::F32, &g);
  auto w = fc.weight.to_vector<double>(), b = fc.bias.to_vector<double>();
  auto xv = x.to_vector<double>();
  std::vector<double> want(3 * 7);
  for (int n = 0; n < 3; ++n)
    for (int o = 0; o < 7; ++o) {
      double s = b[o];
      for (int i = 0; i < 13; ++i) s += xv[n * 13 + i] * w[o * 13 + i];
      want[n * 7 + o] = s;
    }
  // f32 against the f64 loop, 13 products and the bias: the derived element-wise bound
  // (tests/common/tolerance.h), about 2e-5 here (was 1e-5); a wrong index is off by O(1).
  expect_near(
      fc.forward(x).to_vector<double>(), want,
      tessel::test::elementwise_tolerance(DType::F32, 14, 1, tessel::test::max_abs_of(want)));
  Linear no_bias(13, 7, false);
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
  EXPECT_THROW(Linear(0, 3), Error);
  EXPECT_THROW(fc.forward(ones({3, 12})), Error);
}

TEST(Layers, EmbeddingGathersRows) {
  Generator g(6);
  Embedding emb(33, 7, Init::normal(&g));
  Tensor ids = from_data(std::vector<int64_t>{0, 32, 5, 5}, Shape{2, 2});
  Tensor y = emb.forward(ids);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 7}));
  auto w = emb.weight.to_vector<float>(), yv = y.to_vector<float>();
  const int64_t rows[] = {0, 32, 5, 5};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 7; ++c) EXPECT_EQ(yv[r * 7 + c], w[rows[r] * 7 + c]);
  EXPECT_THROW(emb.forward(from_data(std::vector<int64_t>{33}, Shape{1})), Error);
}

TEST(Layers, LayerNormAndRmsNormMatchLoops) {
  Generator g(7);
  LayerNorm ln(13, 1e-5);
  RMSNorm rms(13, 1e-6);
  ln.weight.copy_from(randn({13}, DType::F32, &g));
  ln.bias.copy_from(randn({13}, DType::F32, &g));
  rms.weight.copy_from(randn({13}, DType::F32, &g));
  Tensor x = randn({5, 13}, DType::F32, &g);
  auto xv = x.to_vector<double>(), w = ln.weight.to_vector<double>(),
       b = ln.bias.to_vector<double>(), rw = rms.weight.to_vector<double>();
  std::vector<double> want_ln(65), want_rms(65);
  for (int r = 0; r < 5; ++r) {
    double mean = 0, var = 0, sq = 0;
    for (int c = 0; c < 13; ++c) mean += xv[r * 13 + c] / 13;
    for (int c = 0; c < 13; ++c) {
      double d = xv[r * 13 + c] - mean;
      var += d * d / 13;
      sq += xv[r * 13 + c] * xv[r * 13 + c] / 13;
    }
    for (int c = 0; c < 13; ++c) {
      want_ln[r * 13 + c] = (xv[r * 13 + c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
      want_rms[r * 13 + c] = xv[r * 13 + c] / std::sqrt(sq + 1e-6) * rw[c];
    }
  }
  // f32 against the f64 loops over 13 features: the derived element-wise bound
  // (tests/common/tolerance.h) through mean, variance and normalisation (3 stages; RMSNorm 2),
  // about 4e-5 here (was 1e-4); a wrong mean or epsilon is off by 1e-2 and more.
  expect_near(
      ln.forward(x).to_vector<double>(), want_ln,
      tessel::test::elementwise_tolerance(DType::F32, 13, 3, tessel::test::max_abs_of(want_ln)));
  expect_near(
      rms.forward(x).to_vector<double>(), want_rms,
      tessel::test::elementwise_tolerance(DType::F32, 13, 2, tessel::test::max_abs_of(want_rms)));
  EXPECT_THROW(LayerNorm(0), Error);
  EXPECT_THROW(ln.forward(ones({5, 12})), Error);
}

}  // namespace
}  // namespace tessel::nn
