// SPDX-License-Identifier: Apache-2.0
// LowPrecisionScope's deferred copies (ZeRO-3 makes a unit's copies after its gather): a deferred
// master stays in its members until cast_deferred() swaps its copy in; every member holding it
// (tied weights) gets the same copy; recast() rounds exactly as the cast did; one copy passes
// gradients from several backwards; the masters come back when the scope ends.
#include "tessel/nn/autocast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "common/tolerance.h"
#include "tessel/autograd/autograd.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"

namespace tessel::nn {
namespace {

class Tied : public Module {
 public:
  explicit Tied(Generator* g) : Module("Tied") {
    a = register_module("a", std::make_shared<Linear>(13, 7, true, Init::normal(g, 0.5)));
    b = register_module("b", std::make_shared<Linear>(13, 7, false, Init::normal(g, 0.5)));
    b->weight = a->weight;  // the member only: a tied head reads the same master
  }
  std::shared_ptr<Linear> a, b;
};

TEST(LowPrecisionScope, DeferredMastersWaitForCastDeferredAndShareOneCopy) {
  Generator g(3);
  Tied m(&g);
  const Tensor w = m.a->weight, bias = m.a->bias;
  {
    LowPrecisionScope scope({&m}, DType::BF16,
                            [&](const Tensor& t) { return t.impl_ptr() == w.impl_ptr(); });
    EXPECT_EQ(m.a->weight.dtype(), DType::F32) << "deferred: still the master";
    EXPECT_EQ(m.a->bias.dtype(), DType::BF16) << "not deferred: cast at once";
    EXPECT_FALSE(scope.cast_deferred(bias).defined()) << "bias was not deferred";
    const Tensor copy = scope.cast_deferred(w);
    ASSERT_TRUE(copy.defined());
    EXPECT_EQ(copy.dtype(), DType::BF16);
    EXPECT_EQ(m.a->weight.impl_ptr(), copy.impl_ptr());
    EXPECT_EQ(m.b->weight.impl_ptr(), copy.impl_ptr()) << "tied members share the copy";
    EXPECT_EQ(scope.cast_deferred(w).impl_ptr(), copy.impl_ptr()) << "made once per scope";

    // recast writes what the cast wrote.
    const std::vector<float> cast = copy.to_vector<float>();
    copy.detach().fill(0.0);
    LowPrecisionScope::recast(w, copy);
    EXPECT_EQ(copy.to_vector<float>(), cast);

    // Two forwards and two backwards through one copy: the master's gradient is their sum.
    Tensor x = randn({3, 13}, DType::F32, &g).to(DType::BF16);
    for (int i = 0; i < 2; ++i)
      autograd::backward(ops::sum(ops::cast(m.a->forward(x), DType::F32)));
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().dtype(), DType::F32);
    // d(sum(x W^T))/dW[o][i] = sum over rows of x[:, i], twice.
    const std::vector<float> xs = x.to_vector<float>(), gw = w.grad().to_vector<float>();
    for (int64_t i = 0; i < 13; ++i) {
      float col = 0, mag = 0;
      for (int64_t r = 0; r < 3; ++r) {
        col += xs[size_t(r * 13 + i)];
        mag += std::abs(xs[size_t(r * 13 + i)]);
      }
      // Each backward's bf16 GEMM sums 3 rows and rounds to bf16, then the two add in f32: the
      // derived bound (tests/common/tolerance.h) for 3 terms through 2 stages, relative to the
      // terms' magnitude 2 * sum |x| (was 0.05 |col| + 1e-3, which did not scale with
      // cancellation); a backward missing or counted twice is off by |col|, 50%.
      EXPECT_NEAR(gw[size_t(i)], 2 * col,
                  tessel::test::reference_tolerance(DType::BF16, 3, 2) * 2 * mag)
          << "column " << i;
    }
  }
  EXPECT_EQ(m.a->weight.impl_ptr(), w.impl_ptr()) << "masters back after the scope";
  EXPECT_EQ(m.b->weight.impl_ptr(), w.impl_ptr());
  EXPECT_EQ(m.a->bias.impl_ptr(), bias.impl_ptr());
}

// A mixture-of-experts layer under bf16: the expert stacks compute on 16-bit copies, the router
// keeps its f32 master (selective precision), so the routing equals the f32 layer's for an input
// that is already bf16, the probabilities behind it are f32, and every master gets an f32
// gradient through the copies.
TEST(LowPrecisionScope, MixtureOfExpertsCastsTheExpertsAndKeepsTheRouterF32) {
  Generator g(5);
  MoEConfig c;
  c.hidden = 13;
  c.ffn_hidden = 7;
  c.num_experts = 5;
  c.top_k = 2;
  c.expert = ExpertKind::Gelu;
  c.capacity_factor = 1.0;  // drops: the order of admission must match too
  MoE moe(c, Init::normal(&g, 0.5));
  const Tensor x = randn({33, 13}, DType::F32, &g).to(DType::BF16);
  const Tensor fc = moe.experts->fc_weight, router = moe.router->weight;
  moe.forward(x.to(DType::F32));
  const Routing f32 = moe.last_routing();
  {
    LowPrecisionScope scope(moe, DType::BF16);
    EXPECT_EQ(moe.experts->fc_weight.dtype(), DType::BF16);
    EXPECT_EQ(moe.experts->proj_bias.dtype(), DType::BF16);
    EXPECT_EQ(moe.router->weight.dtype(), DType::F32) << "the router stays f32";
    MoE::Output out = moe.forward(x);
    EXPECT_EQ(out.output.dtype(), DType::BF16);
    EXPECT_EQ(out.aux_loss.dtype(), DType::F32);
    EXPECT_EQ(moe.last_routing().choice, f32.choice);
    EXPECT_EQ(moe.last_routing().kept, f32.kept);
    EXPECT_GT(moe.last_stats().dropped, 0);
    autograd::backward(ops::add(ops::sum(ops::cast(out.output, DType::F32)), out.aux_loss));
  }
  EXPECT_EQ(moe.experts->fc_weight.impl_ptr(), fc.impl_ptr()) << "masters back after the scope";
  ASSERT_TRUE(fc.grad().defined());
  ASSERT_TRUE(router.grad().defined());
  EXPECT_EQ(fc.grad().dtype(), DType::F32);
  EXPECT_EQ(router.grad().dtype(), DType::F32);
}

TEST(LowPrecisionScope, KeptCopiesAreTakenAsTheyAreAndMastersNamesEachOnce) {
  Generator g(5);
  Tied m(&g);
  const Tensor w = m.a->weight, bias = m.a->bias;
  const std::vector<Tensor> masters = LowPrecisionScope::masters({&m});
  ASSERT_EQ(masters.size(), 2u) << "the tied weight once, and the bias";
  Tensor kept = empty(w.shape(), DType::BF16);
  LowPrecisionScope::recast(w, kept);
  const auto keep = [&](const Tensor& t) { return t.impl_ptr() == w.impl_ptr() ? kept : Tensor(); };
  {
    LowPrecisionScope scope({&m}, DType::BF16, {}, keep);
    EXPECT_EQ(m.a->weight.data_ptr(), kept.data_ptr());
    EXPECT_EQ(m.b->weight.data_ptr(), kept.data_ptr()) << "the tied member: the same copy";
    EXPECT_EQ(m.a->bias.dtype(), DType::BF16) << "no kept copy: cast now";
  }
  {  // deferred, as memory offload defers its kept copies to each unit's forward
    LowPrecisionScope scope(
        {&m}, DType::BF16, [&](const Tensor& t) { return keep(t).defined(); }, keep);
    EXPECT_EQ(m.a->weight.dtype(), DType::F32);
    EXPECT_EQ(scope.cast_deferred(w).data_ptr(), kept.data_ptr());
    EXPECT_EQ(m.b->weight.data_ptr(), kept.data_ptr());
  }
  EXPECT_EQ(m.a->weight.impl_ptr(), w.impl_ptr());
  EXPECT_EQ(m.b->weight.impl_ptr(), w.impl_ptr());
  EXPECT_EQ(m.a->bias.impl_ptr(), bias.impl_ptr());
}

}  // namespace
}  // namespace tessel::nn
