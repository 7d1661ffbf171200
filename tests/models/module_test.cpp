// SPDX-License-Identifier: Apache-2.0
// Module bookkeeping: dotted names in registration order, strict state-dict loading whose error
// lists every bad name, train/eval propagation, hooks, observers and in-place dtype conversion.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/tolerance.h"
#include "tessel/autograd/autograd.h"
#include "tessel/models/gpt2/gpt2_block.h"
#include "tessel/nn/nn.h"
#include "tessel/ops/ops.h"

namespace tessel::nn {
namespace {

using Block = models::GPT2Block;
using BlockConfig = models::GPT2BlockConfig;

BlockConfig small_config() {
  BlockConfig c;
  c.n_embd = 12;
  c.n_head = 3;
  c.n_layer = 2;
  return c;
}

std::vector<std::string> names_of(const NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

TEST(Module, BlockParameterNamesInRegistrationOrder) {
  Generator g(1);
  Block block(small_config(), Init::normal(&g));
  std::vector<std::string> want = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                                   "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                   "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                                   "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  EXPECT_EQ(names_of(block.named_parameters()), want);
  EXPECT_EQ(block.find("attn.c_attn.weight").shape(), (Shape{36, 12}));
  EXPECT_EQ(block.find("mlp.c_fc.weight").shape(), (Shape{48, 12}));
  EXPECT_EQ(block.parameter_count(),
            2 * 24 + 36 * 12 + 36 + 144 + 12 + 48 * 12 + 48 + 12 * 48 + 12);
  for (auto& t : block.parameters()) EXPECT_TRUE(t.requires_grad());
  EXPECT_EQ(block.attn->c_attn->path(), "attn.c_attn");
}

TEST(Module, NamedModulesArePathsWithoutTrailingDots) {
  Generator g(1);
  Block block(small_config(), Init::normal(&g));
  std::vector<std::string> paths;
  for (auto& [path, m] : block.named_modules()) paths.push_back(path);
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.front(), "");  // the module itself
  for (size_t i = 1; i < paths.size(); ++i) {
    EXPECT_FALSE(paths[i].empty());
    EXPECT_NE(paths[i].back(), '.') << paths[i];
  }
  EXPECT_NE(std::find(paths.begin(), paths.end(), "attn.c_attn"), paths.end());
  EXPECT_NE(std::find(paths.begin(), paths.end(), "ln_1"), paths.end());
}

TEST(Module, RegistrationRejectsDuplicateAndDottedNames) {
  Module m("Test");
  m.register_parameter("w", zeros({3}));
  try {
    m.register_buffer("w", zeros({3}));
    FAIL() << "duplicate accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w' is already registered"), std::string::npos);
  }
  EXPECT_THROW(m.register_parameter("a.b", zeros({3})), Error);
  EXPECT_THROW(m.register_parameter("i", zeros({3}, DType::I32)), Error);
  auto child = std::make_shared<Linear>(3, 5);
  m.register_module("fc", child);
  Module other("Other");
  EXPECT_THROW(other.register_module("fc", child), Error);  // already has a parent
  EXPECT_THROW(m.find("fc.nope"), Error);
}

TEST(Module, StateDictRoundTripGivesIdenticalOutputs) {
  Generator g1(1), g2(2);
  Block a(small_config(), Init::normal(&g1));
  Block b(small_config(), Init::normal(&g2));
  Tensor x = randn({2, 7, 12}, DType::F32, &g1);
  autograd::NoGradGuard no_grad;
  EXPECT_NE(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
  Tensor before = b.attn->c_attn->weight;
  b.load_state_dict(a.state_dict());
  EXPECT_TRUE(before.is_same(b.attn->c_attn->weight));  // loaded in place
  EXPECT_EQ(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
}

TEST(Module, StrictLoadListsEveryMissingUnexpectedAndMisshapedName) {
  Block block(small_config());
  NamedTensors state = block.state_dict();
  auto drop = [&](const std::string& name) {
    std::erase_if(state, [&](const auto& p) { return p.first == name; });
  };
  drop("ln_1.bias");
  drop("mlp.c_fc.weight");
  state[0].second = zeros({13});  // ln_1.weight mis-shaped
  state.emplace_back("attn.masked_bias", zeros({1}));
  state.emplace_back("extra.weight", zeros({2}));
  try {
    block.load_state_dict(state);
    FAIL() << "bad state accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const char* part :
         {"2 missing", "ln_1.bias", "mlp.c_fc.weight", "2 unexpected", "attn.masked_bias",
          "extra.weight", "1 mis-shaped", "ln_1.weight (expected [12], got [13])"}) {
      EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
    }
  }
  // Non-strict skips missing and unexpected names, but never loads a wrong shape.
  EXPECT_THROW(block.load_state_dict(state, /*strict=*/false), Error);
  state[0].second = full({12}, 3.0);
  block.load_state_dict(state, /*strict=*/false);
  EXPECT_EQ(block.ln_1->weight.to_vector<float>(), std::vector<float>(12, 3.0f));
}

TEST(Module, TrainEvalPropagatesAndControlsDropout) {
  Generator g(3);
  Module root("Root");
  auto drop = root.register_module("drop", std::make_shared<Dropout>(0.5, &g));
  EXPECT_TRUE(drop->is_training());
  Tensor x = ones({257});
  std::vector<float> y = drop->forward(x).to_vector<float>();
  int zeros_seen = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
    zeros_seen += v == 0.0f;
  }
  EXPECT_GT(zeros_seen, 60);
  EXPECT_LT(zeros_seen, 200);
  root.eval();
  EXPECT_FALSE(drop->is_training());
  EXPECT_EQ(drop->forward(x).to_vector<float>(), std::vector<float>(257, 1.0f));
  EXPECT_THROW(Dropout(1.0), Error);
}

TEST(Module, HooksRunAroundForwardAndCanBeRemoved) {
  Linear fc(3, 5);
  int pre_calls = 0;
  int64_t pre = fc.register_forward_pre_hook([&](Module& m, const std::vector<Tensor>& in) {
    ++pre_calls;
    EXPECT_EQ(&m, &fc);
    ASSERT_EQ(in.size(), 1u);
    EXPECT_EQ(in[0].shape(), (Shape{7, 3}));
  });
  int64_t post = fc.register_forward_hook(
      [&](Module&, const std::vector<Tensor>&, Tensor& out) { out = ops::mul(out, 0.0); });
  Tensor y = fc.forward(ones({7, 3}));
  EXPECT_EQ(pre_calls, 1);
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(35, 0.0f));
  fc.remove_hook(post);
  fc.remove_hook(pre);
  fc.forward(ones({7, 3}));
  EXPECT_EQ(pre_calls, 1);
  EXPECT_THROW(fc.remove_hook(post), Error);
}

TEST(Module, ObserversSeeEveryNamedIntermediate) {
  Module root("Root");
  auto block = root.register_module("b", std::make_shared<Block>(small_config()));
  std::vector<std::string> seen;
  Tensor ln_1_out;
  int64_t h = root.add_activation_observer([&](const std::string& name, const Tensor& t) {
    seen.push_back(name);
    if (name == "b.ln_1") ln_1_out = t;
  });
  Tensor x = randn({2, 5, 12});
  block->forward(x);
  std::vector<std::string> want = {
      "b.ln_1",    "b.attn.c_attn", "b.attn.q",      "b.attn.k",
      "b.attn.v",  "b.attn.y",      "b.attn.c_proj", "b.attn.resid_dropout",
      "b.attn",    "b.resid_attn",  "b.ln_2",        "b.mlp.c_fc",
      "b.mlp.act", "b.mlp.c_proj",  "b.mlp.dropout", "b.mlp",
      "b"};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(ln_1_out.to_vector<float>(), block->ln_1->forward(x).to_vector<float>());
  root.remove_hook(h);
  seen.clear();
  block->forward(x);
  EXPECT_TRUE(seen.empty());
}

TEST(Module, ToDtypeConvertsInPlace) {
  Generator g(4);
  Block block(small_config(), Init::normal(&g));
  Tensor x = randn({1, 7, 12}, DType::F32, &g);
  std::vector<float> y32 = block.forward(x).to_vector<float>();
  Tensor w = block.attn->c_attn->weight;
  block.to(DType::F64);
  EXPECT_EQ(w.dtype(), DType::F64);
  for (auto& t : block.parameters()) EXPECT_EQ(t.dtype(), DType::F64);
  std::vector<double> y64 = block.forward(x.to(DType::F64)).to_vector<double>();
  ASSERT_EQ(y32.size(), y64.size());
  // The block in f32 against itself in f64: the derived element-wise bound
  // (tests/common/tolerance.h) for the MLP's 48 terms through the block's 7 stages (ln, c_attn,
  // attention, c_proj, ln, c_fc, c_proj), about 1e-4 (as before); a parameter left in f32 or not
  // converted would make the two agree to f32 only where the conversion is exact.
  const double tol =
      tessel::test::elementwise_tolerance(DType::F32, 48, 7, tessel::test::max_abs_of(y64));
  for (size_t i = 0; i < y32.size(); ++i) EXPECT_NEAR(y32[i], y64[i], tol);
  EXPECT_THROW(block.to(DType::I32), Error);
}

TEST(Module, ZeroGradClearsGradients) {
  Linear fc(3, 5);
  autograd::backward(ops::sum(fc.forward(ones({2, 3}))));
  EXPECT_TRUE(fc.weight.grad().defined());
  fc.zero_grad();
  EXPECT_FALSE(fc.weight.grad().defined());
}

}  // namespace
}  // namespace tessel::nn

namespace tessel::nn {
namespace {

TEST(Module, ForwardOverrideReplacesTheBodyBetweenTheHooks) {
  Linear lin(3, 2, true, Init::none());
  init::ones_(lin.weight);
  init::zeros_(lin.bias);
  std::vector<std::string> calls;
  lin.register_forward_pre_hook(
      [&](Module&, const std::vector<Tensor>&) { calls.push_back("pre"); });
  lin.register_forward_hook(
      [&](Module&, const std::vector<Tensor>&, Tensor&) { calls.push_back("post"); });
  const Tensor x = ones({1, 3});
  EXPECT_EQ(lin.forward(x).data<float>()[0], 3.0f);  // the body: x @ W^T
  lin.set_forward_override([&](Module& m, const std::vector<Tensor>& in) {
    calls.push_back("override");
    EXPECT_EQ(&m, &lin);
    return full({1, 2}, 7.0);
  });
  EXPECT_TRUE(lin.has_forward_override());
  EXPECT_EQ(lin.forward(x).data<float>()[0], 7.0f);
  EXPECT_EQ(calls, (std::vector<std::string>{"pre", "post", "pre", "override", "post"}));
  EXPECT_THROW(
      lin.set_forward_override([](Module&, const std::vector<Tensor>&) { return Tensor(); }),
      Error);
  lin.set_forward_override({});  // restores the body
  EXPECT_EQ(lin.forward(x).data<float>()[0], 3.0f);
}

}  // namespace
}  // namespace tessel::nn
