// SPDX-License-Identifier: Apache-2.0
// The MoE layer's own rules (its numerics are checked against PyTorch in tests/parity/): config
// validation errors, GShard's capacity and dropping order on a hand-worked example, no padding in
// the no-drop mode, router jitter (eval, replay, the noise the router saw), per-call statistics and
// the pyramid of per-layer expert counts.
#include "tessel/nn/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "common/error_text.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/ops/ops.h"

namespace tessel::nn {
namespace {

using tessel::test::expect_error;

MoEConfig small(int64_t experts = 5, int64_t k = 2) {
  MoEConfig c;
  c.hidden = 13;
  c.ffn_hidden = 7;
  c.num_experts = experts;
  c.top_k = k;
  return c;
}

TEST(MoEConfig, EachBadValueIsOneClearError) {
  MoEConfig c = small(2, 3);
  expect_error([&] { c.validate(); }, {"top_k 3", "num_experts 2"});
  c = small(0, 1);
  expect_error([&] { c.validate(); }, {"num_experts", "got 0"});
  c = small();
  c.capacity_factor = 0;
  expect_error([&] { c.validate(); }, {"capacity_factor", "got 0", "drop_tokens"});
  c.capacity_factor = -1.5;
  expect_error([&] { c.validate(); }, {"capacity_factor", "-1.5"});
  c.drop_tokens = false;  // no capacity: the factor is not read
  EXPECT_NO_THROW(c.validate());
  c = small(5, 0);
  expect_error([&] { c.validate(); }, {"top_k", "got 0"});
  c = small();
  c.residual = true;
  expect_error([&] { c.validate(); }, {"residual", "top_k must be 1", "got 2"});
  c = small();
  c.jitter = 1.0;
  expect_error([&] { c.validate(); }, {"jitter", "[0, 1)", "got 1"});
  c = small();
  c.z_loss_coef = -0.1;
  expect_error([&] { c.validate(); }, {"z_loss_coef", "-0.1"});
  c = small();
  c.ffn_hidden = 0;
  expect_error([&] { c.validate(); }, {"ffn_hidden (0)"});
  expect_error([] { parse_gate_form("gshard2"); }, {"gate_form", "gshard2", "mixtral", "switch"});
  expect_error([] { parse_expert_kind("relu"); }, {"expert", "relu", "swiglu", "gelu"});
  // The layer validates at construction.
  expect_error([] { MoE m(small(2, 3), Init::none()); }, {"top_k 3", "num_experts 2"});
}

TEST(MoERouting, CapacityDropsInGShardPriorityOrder) {
  // 5 tokens, 3 experts, top-2, capacity ceil(0.6 * 5 * 2 / 3) = 2.
  MoEConfig c = small(3, 2);
  c.capacity_factor = 0.6;
  ASSERT_EQ(c.capacity(5), 2);
  const std::vector<double> probs = {
      0.6, 0.3, 0.1,  // token 0: 0 then 1
      0.5, 0.1, 0.4,  // token 1: 0 then 2
      0.7, 0.2, 0.1,  // token 2: 0 (full: dropped), then 1
      0.1, 0.3, 0.6,  // token 3: 2 then 1
      0.2, 0.2, 0.6,  // token 4: 2 then 0 (equal probabilities: the lower index first)
  };
  Routing r = route_tokens(probs, 5, c);
  EXPECT_EQ(r.choice, (std::vector<int64_t>{0, 1, 0, 2, 0, 1, 2, 1, 2, 0}));
  // First choices in token order: expert 0 takes tokens 0 and 1, drops token 2; expert 2 takes
  // 3 and 4. Second choices after them: expert 1 takes tokens 0 and 2, drops 3; expert 2 is full
  // (drops token 1's), expert 0 is full (drops token 4's).
  EXPECT_EQ(std::vector<int>(r.kept.begin(), r.kept.end()),
            (std::vector<int>{1, 1, 1, 0, 0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(r.source, (std::vector<int64_t>{0, 1, 0, 2, 3, 4}));
  EXPECT_EQ(r.expert_of_row, (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(r.routed, (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(r.first_choice_count, (std::vector<int64_t>{3, 0, 2}));
  EXPECT_EQ(r.dropped(), 4);

  // Without dropping every pair is kept and the rows are exactly the pairs: no padding.
  c.drop_tokens = false;
  Routing all = route_tokens(probs, 5, c);
  EXPECT_EQ(all.capacity, 0);
  EXPECT_EQ(all.rows(), 10);
  EXPECT_EQ(all.dropped(), 0);
  EXPECT_EQ(all.offsets, (std::vector<int64_t>{0, 4, 7, 10}));
  EXPECT_EQ(all.source, (std::vector<int64_t>{0, 1, 2, 4, 0, 2, 3, 3, 4, 1}));
}

TEST(MoELayer, StatisticsDescribeTheCall) {
  Generator g(3);
  MoEConfig c = small(5, 2);
  c.capacity_factor = 0.5;
  MoE moe(c, Init::normal(&g, 0.5));
  Tensor x = randn({3, 11, 13}, DType::F32, &g);
  MoE::Output out = moe.forward(x);
  EXPECT_EQ(out.output.shape(), x.shape());
  const MoEStats& s = moe.last_stats();
  EXPECT_EQ(s.tokens, 33);
  EXPECT_EQ(s.capacity, 7);  // ceil(0.5 * 33 * 2 / 5)
  const int64_t kept =
      std::accumulate(s.tokens_per_expert.begin(), s.tokens_per_expert.end(), int64_t(0));
  EXPECT_EQ(std::accumulate(s.routed_per_expert.begin(), s.routed_per_expert.end(), int64_t(0)),
            66);
  EXPECT_EQ(kept + s.dropped, 66);
  EXPECT_GT(s.dropped, 0);
  for (int64_t n : s.tokens_per_expert) EXPECT_LE(n, 7);
  EXPECT_NEAR(s.aux_loss, c.aux_loss_coef * s.balance_loss + c.z_loss_coef * s.z_loss, 1e-9);
  // E * sum f_i P_i: 1 when perfectly balanced, at most E (all on one expert).
  EXPECT_GT(s.balance_loss, 0);
  EXPECT_LE(s.balance_loss, 5.0 + 1e-6);
  const std::string j = s.json();
  for (const char* key :
       {"\"tokens\":33", "\"capacity\":7", "\"tokens_per_expert\":[", "\"routed_per_expert\":[",
        "\"dropped\":", "\"aux_loss\":", "\"z_loss\":"})
    EXPECT_NE(j.find(key), std::string::npos) << j << " lacks " << key;
}

TEST(MoELayer, RouterJitterIsReplayableAndOnlyInTraining) {
  Generator init(11);
  MoEConfig c = small(5, 2);
  c.drop_tokens = false;
  c.jitter = 0.3;
  Generator noise(42);
  MoE moe(c, Init::normal(&init, 0.5, DType::F64), &noise);
  Tensor x = randn({33, 13}, DType::F64, &init);

  // Eval: no noise, no draw.
  moe.eval();
  moe.forward(x);
  const std::vector<int64_t> clean = moe.last_routing().choice;
  EXPECT_EQ(noise.offset(), 0u);

  moe.train();
  Tensor y1 = moe.forward(x).output;
  EXPECT_EQ(noise.offset(), uint64_t(33 * 13));
  const std::vector<int64_t> jittered = moe.last_routing().choice;
  noise.set_state(42, 0);
  Tensor y2 = moe.forward(x).output;
  EXPECT_EQ(y1.to_vector<double>(), y2.to_vector<double>()) << "a replay must give the same noise";

  // The router saw x * (1 - eps + 2 eps u_i) with u_i = uniform_at(42, 0, i).
  std::vector<double> xv = x.to_vector<double>(), xn(xv.size());
  for (size_t i = 0; i < xv.size(); ++i)
    xn[i] = xv[i] * (1 - c.jitter + 2 * c.jitter * double(uniform_at(42, 0, i)));
  autograd::NoGradGuard no_grad;
  Tensor probs = ops::softmax(ops::linear(from_data(xn, {33, 13}), moe.router->weight));
  Routing want = route_tokens(probs.to_vector<double>(), 33, c);
  EXPECT_EQ(jittered, want.choice);
  EXPECT_NE(jittered, clean) << "30% jitter changed no routing decision of 33 tokens (seeded)";
}

TEST(MoEPyramid, PerLayerExpertCounts) {
  MoEConfig base = small(4, 2);
  MoEPyramid pyramid{{0, 4, 0, 8, 0, 16}};
  EXPECT_NO_THROW(pyramid.validate(base));
  EXPECT_FALSE(pyramid.is_moe(0));
  EXPECT_TRUE(pyramid.is_moe(3));
  EXPECT_EQ(pyramid.for_layer(base, 5).num_experts, 16);
  MoE last(pyramid.for_layer(base, 5), Init::none());
  EXPECT_EQ(last.experts->gate_proj.shape(), (Shape{16, 7, 13}));
  expect_error([&] { pyramid.for_layer(base, 2); }, {"layer 2", "dense"});
  expect_error([&] { pyramid.is_moe(6); }, {"layer 6", "6 layers"});
  expect_error(
      [&] {
        MoEPyramid{{4, 1}}.validate(base);
      },
      {"experts_per_layer[1] is 1", "top_k 2"});
  expect_error([&] { MoEPyramid{{4, -2}}.validate(base); }, {"experts_per_layer[1] is -2"});
}

}  // namespace
}  // namespace tessel::nn
