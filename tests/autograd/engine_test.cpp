// SPDX-License-Identifier: Apache-2.0
// The backward engine: scalar roots and given output gradients, accumulation into .grad, tensors
// used several times, no-grad mode, hooks, and the retain_graph rule.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tessel/autograd/autograd.h"
#include "tessel/ops/ops.h"

namespace tessel::autograd {
namespace {

Tensor leaf(std::vector<double> values) {
  Tensor t = from_data(values, {int64_t(values.size())});
  t.set_requires_grad(true);
  return t;
}

std::vector<double> grad_of(const Tensor& t) {
  return t.grad().to_vector<double>();
}

template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> words) {
  try {
    fn();
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    std::string what = e.what();
    for (const std::string& w : words) EXPECT_NE(what.find(w), std::string::npos) << what;
  }
}

TEST(Engine, BackwardFromScalar) {
  Tensor x = leaf({1.0, -2.0, 3.0});
  Tensor loss = ops::sum(ops::mul(x, x));  // d/dx = 2x
  ASSERT_TRUE(loss.requires_grad());
  EXPECT_FALSE(is_leaf(loss));
  EXPECT_TRUE(is_leaf(x));
  backward(loss);
  EXPECT_EQ(grad_of(x), (std::vector<double>{2.0, -4.0, 6.0}));
}

TEST(Engine, BackwardWithGivenOutputGradients) {
  Tensor x = leaf({1.0, 2.0, 3.0}), y = leaf({0.5, 0.25, 4.0});
  Tensor a = ops::mul(x, y), b = ops::exp(y);
  Tensor ga = from_data(std::vector<double>{1.0, 10.0, 100.0}, {3});
  Tensor gb = from_data(std::vector<double>{2.0, 0.0, -1.0}, {3});
  backward({a, b}, {ga, gb});
  EXPECT_EQ(grad_of(x), (std::vector<double>{0.5, 2.5, 400.0}));
  std::vector<double> gy = grad_of(y);
  EXPECT_DOUBLE_EQ(gy[0], 1.0 + 2.0 * std::exp(0.5));
  EXPECT_DOUBLE_EQ(gy[1], 20.0);
  EXPECT_DOUBLE_EQ(gy[2], 300.0 - std::exp(4.0));
  // A gradient of the wrong shape is refused.
  Tensor c = ops::mul(x, 2.0);
  expect_error([&] { backward({c}, {zeros({2}, DType::F64)}); }, {"backward", "[2]", "[3]"});
}

TEST(Engine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1.0, 2.0});
  backward(ops::sum(ops::mul(x, 3.0)));
  Tensor first = x.grad();
  backward(ops::sum(ops::square(x)));
  EXPECT_EQ(grad_of(x), (std::vector<double>{5.0, 7.0}));
  // Accumulation is in place: a handle taken earlier sees the sum.
  EXPECT_TRUE(first.is_same(x.grad()));
  x.set_grad(Tensor());
  backward(ops::sum(x));
  EXPECT_EQ(grad_of(x), (std::vector<double>{1.0, 1.0}));
}

TEST(Engine, TensorUsedSeveralTimesSumsItsGradients) {
  Tensor x = leaf({2.0, -1.0});
  Tensor h = ops::tanh(x);  // a non-leaf used three times
  Tensor loss = ops::sum(ops::add(ops::mul(h, h), ops::mul(h, 3.0)));
  backward(loss);
  std::vector<double> g = grad_of(x);
  for (int i = 0; i < 2; ++i) {
    double xi = i == 0 ? 2.0 : -1.0, t = std::tanh(xi);
    EXPECT_NEAR(g[size_t(i)], (2 * t + 3) * (1 - t * t), 1e-15);
  }
}

TEST(Engine, NoGradGuardRecordsNothing) {
  Tensor x = leaf({1.0, 2.0});
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_enabled());
    Tensor y = ops::exp(ops::mul(x, x));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(grad_fn(y), nullptr);
    EXPECT_EQ(y.autograd_meta(), nullptr);
    expect_error([&] { backward(ops::sum(y)); }, {"backward", "does not require grad"});
    {
      GradModeGuard on(true);
      EXPECT_TRUE(ops::mul(x, 2.0).requires_grad());
    }
    EXPECT_FALSE(grad_enabled());
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Engine, BackwardTwiceNeedsRetainGraph) {
  Tensor x = leaf({1.0, 2.0});
  Tensor loss = ops::sum(ops::mul(ops::exp(x), x));
  backward(loss, /*retain_graph=*/true);
  std::vector<double> once = grad_of(x);
  backward(loss);  // allowed: the first pass kept the graph
  std::vector<double> twice = grad_of(x);
  for (size_t i = 0; i < 2; ++i) EXPECT_DOUBLE_EQ(twice[i], 2 * once[i]);
  expect_error([&] { backward(loss); }, {"backward", "retain_graph", "already ran"});
}

TEST(Engine, RootMustBeScalarOrHaveAGradient) {
  Tensor x = leaf({1.0, 2.0});
  expect_error([&] { backward(ops::mul(x, 2.0)); }, {"backward", "single-element", "[2]"});
  expect_error([&] { backward(from_data(std::vector<double>{1.0}, {1})); },
               {"backward", "does not require grad"});
}

TEST(Engine, IntermediateGradientsAreNotStored) {
  Tensor x = leaf({1.0, 2.0});
  Tensor h = ops::mul(x, 2.0);
  backward(ops::sum(h));
  EXPECT_FALSE(h.grad().defined());
  EXPECT_TRUE(x.grad().defined());
}

TEST(Engine, LongChainIsFreedWithoutRecursion) {
  Tensor x = leaf({1.0});
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = ops::add(y, 1.0);
  backward(y);
  EXPECT_EQ(grad_of(x), std::vector<double>{1.0});
  y = Tensor();  // drops 100000 nodes
}

}  // namespace
}  // namespace tessel::autograd
