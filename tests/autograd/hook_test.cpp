// SPDX-License-Identifier: Apache-2.0
// Grad-ready hooks: one call per leaf per backward, as soon as that leaf's gradient is complete
// (so the last layer's parameters are announced before the first layer's are even computed).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tessel/autograd/autograd.h"
#include "tessel/ops/ops.h"

namespace tessel::autograd {
namespace {

Tensor param(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  Tensor t = randn(shape, DType::F64, &g);
  t.set_requires_grad(true);
  return t;
}

// An identity op whose backward notes that it ran: it marks when back-propagation reaches the
// first layer's input.
class ProbeBackward final : public Node {
 public:
  explicit ProbeBackward(bool* ran) : ran_(ran) {}
  std::string_view name() const override { return "ProbeBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    *ran_ = true;
    return {grads[0]};
  }

 private:
  bool* ran_;
};

Tensor probe(const Tensor& x, bool* ran) {
  Tensor y = x.clone();
  record(std::make_shared<ProbeBackward>(ran), {x}, {y});
  return y;
}

struct TwoLayers {
  Tensor w1 = param({13, 7}, 1), b1 = param({13}, 2), w2 = param({5, 13}, 3), b2 = param({5}, 4);
  Tensor x = param({3, 7}, 5);
  bool reached_input = false;
  Tensor loss() {
    Tensor h = ops::gelu(ops::linear(probe(x, &reached_input), w1, b1));
    return ops::sum(ops::square(ops::linear(h, w2, b2)));
  }
};

TEST(Hooks, FireOncePerLeafLastLayerFirst) {
  TwoLayers m;
  std::vector<std::string> fired;
  bool first_layer_pending_when_w2_fired = false;
  std::vector<double> w2_grad_at_hook;
  register_grad_ready_hook(m.w2, [&](const Tensor& leaf) {
    fired.push_back("w2");
    EXPECT_TRUE(leaf.is_same(m.w2));
    w2_grad_at_hook = leaf.grad().to_vector<double>();
    first_layer_pending_when_w2_fired = !m.reached_input && !m.w1.grad().defined();
  });
  register_grad_ready_hook(m.b2, [&](const Tensor&) { fired.push_back("b2"); });
  register_grad_ready_hook(m.w1, [&](const Tensor&) { fired.push_back("w1"); });
  register_grad_ready_hook(m.b1, [&](const Tensor&) { fired.push_back("b1"); });
  register_grad_ready_hook(m.x, [&](const Tensor&) { fired.push_back("x"); });
  backward(m.loss());

  ASSERT_EQ(fired.size(), 5u);
  auto pos = [&](const std::string& n) {
    return std::find(fired.begin(), fired.end(), n) - fired.begin();
  };
  EXPECT_LT(pos("w2"), pos("w1"));
  EXPECT_LT(pos("b2"), pos("w1"));
  EXPECT_LT(pos("w2"), pos("b1"));
  EXPECT_TRUE(m.reached_input);
  // Fired as soon as w2 was ready: back-propagation had not yet reached the first layer.
  EXPECT_TRUE(first_layer_pending_when_w2_fired);
  EXPECT_EQ(w2_grad_at_hook, m.w2.grad().to_vector<double>());  // the gradient was complete
}

TEST(Hooks, LeafUsedTwiceFiresOnceWithTheSummedGradient) {
  Tensor w = param({7, 7}, 6), x = param({2, 7}, 7);
  int calls = 0;
  std::vector<double> at_hook;
  register_grad_ready_hook(w, [&](const Tensor& leaf) {
    ++calls;
    at_hook = leaf.grad().to_vector<double>();
  });
  Tensor loss = ops::sum(ops::tanh(ops::linear(ops::tanh(ops::linear(x, w)), w)));
  backward(loss);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(at_hook, w.grad().to_vector<double>());

  // A second backward fires again, after accumulating into the existing gradient.
  std::vector<double> first = w.grad().to_vector<double>();
  Tensor loss2 = ops::sum(ops::tanh(ops::linear(ops::tanh(ops::linear(x, w)), w)));
  backward(loss2);
  EXPECT_EQ(calls, 2);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_DOUBLE_EQ(at_hook[i], 2 * first[i]);
}

TEST(Hooks, RemovedHookDoesNotFireAndOnlyLeavesTakeHooks) {
  Tensor w = param({3}, 8);
  int calls = 0;
  int64_t h = register_grad_ready_hook(w, [&](const Tensor&) { ++calls; });
  remove_grad_ready_hook(w, h);
  backward(ops::sum(ops::mul(w, w)));
  EXPECT_EQ(calls, 0);
  Tensor y = ops::mul(w, 2.0);
  EXPECT_THROW(register_grad_ready_hook(y, [](const Tensor&) {}), Error);
  EXPECT_THROW(register_grad_ready_hook(zeros({3}), [](const Tensor&) {}), Error);
  EXPECT_THROW(remove_grad_ready_hook(w, h), Error);
}

TEST(Hooks, LeafOutsideTheGraphDoesNotFire) {
  Tensor used = param({3}, 9), unused = param({3}, 10);
  int calls = 0;
  register_grad_ready_hook(unused, [&](const Tensor&) { ++calls; });
  backward(ops::sum(used));
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(unused.grad().defined());
}

}  // namespace
}  // namespace tessel::autograd
