// SPDX-License-Identifier: Apache-2.0
// A 2-layer MLP (linear -> gelu -> linear -> MSE) whose autograd gradients are compared with the
// hand-derived backward pass written out as plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "common/tolerance.h"
#include "tessel/autograd/autograd.h"
#include "tessel/ops/ops.h"

namespace tessel::autograd {
namespace {

constexpr int kN = 7, kIn = 5, kHidden = 13, kOut = 3;

using Vec = std::vector<double>;

struct HandGrads {
  Vec dx, dw1, db1, dw2, db2;
  double loss = 0;
};

double gelu(double h) {
  const double c = std::sqrt(2 / std::numbers::pi);
  return 0.5 * h * (1 + std::tanh(c * (h + 0.044715 * h * h * h)));
}

double gelu_grad(double h) {
  const double c = std::sqrt(2 / std::numbers::pi);
  const double t = std::tanh(c * (h + 0.044715 * h * h * h));
  return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * c * (1 + 3 * 0.044715 * h * h);
}

// loss = mean((W2 gelu(W1 x + b1) + b2 - target)^2) over all N * Out elements.
HandGrads hand_backward(const Vec& x, const Vec& w1, const Vec& b1, const Vec& w2, const Vec& b2,
                        const Vec& target) {
  HandGrads g;
  g.dx.assign(kN * kIn, 0);
  g.dw1.assign(kHidden * kIn, 0);
  g.db1.assign(kHidden, 0);
  g.dw2.assign(kOut * kHidden, 0);
  g.db2.assign(kOut, 0);
  for (int n = 0; n < kN; ++n) {
    Vec h(kHidden), a(kHidden), dy(kOut), da(kHidden, 0);
    for (int j = 0; j < kHidden; ++j) {
      h[j] = b1[j];
      for (int i = 0; i < kIn; ++i) h[j] += w1[j * kIn + i] * x[n * kIn + i];
      a[j] = gelu(h[j]);
    }
    for (int o = 0; o < kOut; ++o) {
      double y = b2[o];
      for (int j = 0; j < kHidden; ++j) y += w2[o * kHidden + j] * a[j];
      double diff = y - target[n * kOut + o];
      g.loss += diff * diff / (kN * kOut);
      dy[o] = 2 * diff / (kN * kOut);
      g.db2[o] += dy[o];
      for (int j = 0; j < kHidden; ++j) {
        g.dw2[o * kHidden + j] += dy[o] * a[j];
        da[j] += dy[o] * w2[o * kHidden + j];
      }
    }
    for (int j = 0; j < kHidden; ++j) {
      double dh = da[j] * gelu_grad(h[j]);
      g.db1[j] += dh;
      for (int i = 0; i < kIn; ++i) {
        g.dw1[j * kIn + i] += dh * x[n * kIn + i];
        g.dx[n * kIn + i] += dh * w1[j * kIn + i];
      }
    }
  }
  return g;
}

void expect_close(const Tensor& got, const Vec& want, double rel) {
  Vec v = got.to_vector<double>();
  ASSERT_EQ(v.size(), want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], want[i], rel * scale) << "element " << i;
}

void check_mlp(DType dtype, double rel) {
  Generator gen(2024);
  auto make = [&](const Shape& s, bool grad) {
    Tensor t = randn(s, DType::F64, &gen).to(dtype);
    if (grad) t.set_requires_grad(true);
    return t;
  };
  Tensor x = make({kN, kIn}, true), w1 = make({kHidden, kIn}, true), b1 = make({kHidden}, true);
  Tensor w2 = make({kOut, kHidden}, true), b2 = make({kOut}, true),
         target = make({kN, kOut}, false);

  Tensor loss = ops::mse_loss(ops::linear(ops::gelu(ops::linear(x, w1, b1)), w2, b2), target);
  EXPECT_EQ(loss.ndim(), 0);
  backward(loss);

  auto v = [](const Tensor& t) { return t.to_vector<double>(); };
  HandGrads g = hand_backward(v(x), v(w1), v(b1), v(w2), v(b2), v(target));
  EXPECT_NEAR(loss.item(), g.loss, rel * g.loss);
  expect_close(x.grad(), g.dx, rel);
  expect_close(w1.grad(), g.dw1, rel);
  expect_close(b1.grad(), g.db1, rel);
  expect_close(w2.grad(), g.dw2, rel);
  expect_close(b2.grad(), g.db2, rel);
  EXPECT_EQ(w1.grad().dtype(), dtype);
}

TEST(Mlp, GradientsMatchHandDerivedLoopsF64) {
  // f64 against f64 loops: both round, and the kernels' f64 gelu (tanh) need not be libm's to the
  // last ulp; 1e-12 is a judgement bound far above both (1e-14) and far below a bug (1e-3).
  check_mlp(DType::F64, 1e-12);
}
TEST(Mlp, GradientsMatchHandDerivedLoopsF32) {
  // f32 against the f64 loops: the derived bound relative to the largest element
  // (tests/common/tolerance.h's elementwise_tolerance, max_abs 1) for the loss's kN * kOut = 21
  // terms through the 3 stages (linear, gelu + linear, loss): 8.7e-6 (was 1e-5).
  check_mlp(DType::F32, tessel::test::elementwise_tolerance(DType::F32, kN * kOut, 3, 1.0));
}

}  // namespace
}  // namespace tessel::autograd
