// SPDX-License-Identifier: Apache-2.0
// The LLaMA module: Hugging Face parameter names and shapes (GQA, head_dim, biases, tied and
// untied heads), its published initialisation from a Generator (bit-reproducible), the pipeline
// layering, activation recomputation giving the gradients of none (and holding less), and the
// KV-cache decoding equal to the full forward in chunks (GQA, a sliding window, batch 2).
#include "tessel/models/llama/llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/lcg_ids.h"
#include "common/small_llama.h"
#include "common/tolerance.h"
#include "tessel/autograd/autograd.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/nn/autocast.h"
#include "tessel/tensor/allocator.h"

namespace tessel::models {
namespace {

LlamaConfig small(LlamaVariant variant = LlamaVariant::Llama) {
  return test::small_llama_config(variant);
}

Tensor tokens(int64_t b, int64_t t, uint64_t seed, int64_t vocab = 37) {
  return test::lcg_ids(b, t, seed, vocab);
}

TEST(Llama, ParameterNamesAndShapesAreHuggingFaces) {
  LlamaConfig c = small();
  c.head_dim = 8;  // q width 32 != hidden 24
  c.attention_bias = c.mlp_bias = true;
  Generator g(1);
  auto model = Llama::random(c, g);
  std::vector<std::pair<std::string, Shape>> want = {{"embed_tokens.weight", {37, 24}}};
  for (int l = 0; l < 3; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (auto [name, shape] :
         std::vector<std::pair<std::string, Shape>>{{"input_layernorm.weight", {24}},
                                                    {"self_attn.q_proj.weight", {32, 24}},
                                                    {"self_attn.q_proj.bias", {32}},
                                                    {"self_attn.k_proj.weight", {16, 24}},
                                                    {"self_attn.k_proj.bias", {16}},
                                                    {"self_attn.v_proj.weight", {16, 24}},
                                                    {"self_attn.v_proj.bias", {16}},
                                                    {"self_attn.o_proj.weight", {24, 32}},
                                                    {"self_attn.o_proj.bias", {24}},
                                                    {"post_attention_layernorm.weight", {24}},
                                                    {"mlp.gate_proj.weight", {40, 24}},
                                                    {"mlp.gate_proj.bias", {40}},
                                                    {"mlp.up_proj.weight", {40, 24}},
                                                    {"mlp.up_proj.bias", {40}},
                                                    {"mlp.down_proj.weight", {24, 40}},
                                                    {"mlp.down_proj.bias", {24}}})
      want.emplace_back(p + name, shape);
  }
  want.emplace_back("norm.weight", Shape{24});
  want.emplace_back("lm_head.weight", Shape{37, 24});
  auto got = model->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.shape(), want[i].second) << got[i].first;
  }
  EXPECT_EQ(model->parameter_count(), c.parameter_count());
  // Qwen2: q/k/v biases only; tied: no lm_head.
  LlamaConfig q = small(LlamaVariant::Qwen2);
  q.tie_word_embeddings = true;
  auto qwen = Llama::random(q, g);
  EXPECT_EQ(qwen->parameter_count(), q.parameter_count());
  EXPECT_NO_THROW(qwen->find("layers.0.self_attn.k_proj.bias"));
  EXPECT_THROW(qwen->find("layers.0.self_attn.o_proj.bias"), Error);
  EXPECT_THROW(qwen->find("lm_head.weight"), Error);
  EXPECT_EQ(qwen->head_tied_parameters(), (std::vector<std::string>{"embed_tokens.weight"}));
  EXPECT_TRUE(model->head_tied_parameters().empty());
}

TEST(Llama, InitialisationIsPublishedAndBitReproducible) {
  LlamaConfig c = small();
  c.initializer_range = 0.02;
  c.attention_bias = true;
  Generator g1(7), g2(7);
  auto a = Llama::random(c, g1), b = Llama::random(c, g2);
  auto sa = a->state_dict(), sb = b->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) {
    const std::string& name = sa[i].first;
    ASSERT_EQ(std::memcmp(sa[i].second.data_ptr(), sb[i].second.data_ptr(), sa[i].second.nbytes()),
              0)
        << name;
    std::vector<double> v = sa[i].second.to_vector<double>();
    double sum = 0, sq = 0;
    for (double x : v) sum += x, sq += x * x;
    const double mean = sum / double(v.size()),
                 std = std::sqrt(sq / double(v.size()) - mean * mean);
    if (name.find("norm") != std::string::npos) {
      EXPECT_EQ(mean, 1.0) << name;
      EXPECT_EQ(std, 0.0) << name;
    } else if (name.find(".bias") != std::string::npos) {
      EXPECT_EQ(sq, 0.0) << name;
    } else {
      EXPECT_NEAR(std, 0.02, 0.02 * 0.25) << name;  // >= 24 x 16 draws
      EXPECT_NEAR(mean, 0.0, 0.02 * 0.25) << name;
    }
  }
  Generator g3(8);
  auto other = Llama::random(c, g3);
  EXPECT_NE(std::memcmp(other->embed_tokens->weight.data_ptr(), a->embed_tokens->weight.data_ptr(),
                        a->embed_tokens->weight.nbytes()),
            0);
}

TEST(Llama, PipelineLayering) {
  LlamaConfig c = small();
  Generator g(3);
  auto model = Llama::random(c, g);
  EXPECT_EQ(model->num_layers(), 3);
  for (auto& [name, p] : model->named_parameters()) {
    const int64_t layer = model->layer_of_parameter(name);
    if (name.rfind("embed_tokens.", 0) == 0)
      EXPECT_EQ(layer, 0);
    else if (name.rfind("layers.", 0) == 0)
      EXPECT_EQ(layer, 1 + (name[7] - '0')) << name;
    else
      EXPECT_EQ(layer, 4) << name;
  }
  EXPECT_THROW(model->layer_of_parameter("layers.3.mlp.up_proj.weight"), Error);
  EXPECT_THROW(model->layer_of_parameter("wte.weight"), Error);
  EXPECT_EQ(model->unit_paths(),
            (std::vector<std::string>{"layers.0", "layers.1", "layers.2", "norm", "lm_head"}));
  std::vector<double> costs = model->layer_costs();
  ASSERT_EQ(costs.size(), 5u);
  EXPECT_EQ(costs[0], 0.0);
  EXPECT_EQ(costs[1], double(c.layer_parameter_count()));
  EXPECT_EQ(costs[4], double(37 * 24 + 24));
  // forward is embed, blocks, head in order.
  Tensor ids = tokens(2, 9, 5);
  autograd::NoGradGuard no_grad;
  Tensor x = model->embed(ids);
  for (int64_t i = 0; i < 3; ++i) x = model->block(i, x);
  Tensor by_layers = model->head(x), whole = model->forward(ids);
  ASSERT_EQ(whole.shape(), (Shape{2, 9, 37}));
  EXPECT_EQ(std::memcmp(by_layers.data_ptr(), whole.data_ptr(), whole.nbytes()), 0);
  EXPECT_THROW(model->forward(tokens(1, 33, 5)), Error);  // past max_position_embeddings
}

struct Pass {
  double loss = 0;
  std::vector<std::vector<char>> grads;
  int64_t saved = 0;
};

Pass train_once(nn::Recompute mode, const LlamaConfig& c) {
  Generator g(11);
  auto model = Llama::random(c, g);
  model->set_recompute(mode);
  EXPECT_EQ(model->recompute(), mode);
  Tensor ids = tokens(3, 13, 21), targets = tokens(3, 13, 22);
  Allocator& a = cpu_allocator();
  const int64_t before = int64_t(a.bytes_in_use());
  Pass pass;
  Tensor loss = model->loss(ids, targets);
  pass.saved = int64_t(a.bytes_in_use()) - before;
  pass.loss = loss.item();
  autograd::backward(loss);
  for (const Tensor& p : model->parameters()) {
    const char* bytes = static_cast<const char*>(p.grad().data_ptr());
    pass.grads.emplace_back(bytes, bytes + p.grad().nbytes());
  }
  return pass;
}

TEST(Llama, RecomputationGivesTheSameGradientsAndKeepsLess) {
  LlamaConfig c = small(LlamaVariant::Mistral);
  c.sliding_window = 5;
  Pass none = train_once(nn::Recompute::None, c);
  Pass selective = train_once(nn::Recompute::Selective, c);
  Pass full = train_once(nn::Recompute::Full, c);
  for (const Pass* p : {&selective, &full}) {
    EXPECT_EQ(p->loss, none.loss);
    ASSERT_EQ(p->grads.size(), none.grads.size());
    for (size_t i = 0; i < none.grads.size(); ++i) EXPECT_EQ(p->grads[i], none.grads[i]) << i;
  }
  EXPECT_LT(selective.saved, none.saved);
  EXPECT_LT(full.saved, selective.saved);
}

// forward_step over chunks against the full forward: the same f32 sums on other shapes.
void check_chunks(const LlamaConfig& c, int64_t batch, const std::vector<int64_t>& chunks) {
  Generator g(31);
  auto model = Llama::random(c, g);
  model->eval();
  int64_t total = 0;
  for (int64_t n : chunks) total += n;
  Tensor ids = tokens(batch, total, 41);
  autograd::NoGradGuard no_grad;
  Tensor full = model->forward(ids);
  const double tol = 2 * tessel::test::elementwise_tolerance(
                             DType::F32, c.intermediate_size, c.num_hidden_layers + 2,
                             tessel::test::max_abs_of(full.to_vector<double>()));
  KVCache cache = model->make_cache(batch);
  EXPECT_EQ(cache.n_head(), c.num_key_value_heads);
  EXPECT_EQ(cache.head_dim(), c.head_dim);
  int64_t start = 0;
  for (int64_t len : chunks) {
    Tensor got = model->forward_step(ids.slice(1, start, start + len), cache);
    std::vector<double> a = got.to_vector<double>(),
                        b = full.slice(1, start, start + len).to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
    EXPECT_LE(diff, tol) << "chunk at " << start << " of " << len;
    start += len;
  }
  // last_only gives the last row.
  KVCache again = model->make_cache(batch);
  Tensor last = model->forward_step(ids, again, true);
  EXPECT_EQ(last.shape(), (Shape{batch, 1, c.vocab_size}));
}

TEST(Llama, CachedDecodingEqualsTheFullForward) {
  LlamaConfig gqa = small();
  check_chunks(gqa, 1, {5, 1, 1, 4, 1});
  check_chunks(gqa, 2, {3, 1, 6, 1});
  LlamaConfig mqa = small();
  mqa.num_key_value_heads = 1;
  mqa.tie_word_embeddings = true;
  check_chunks(mqa, 2, {1, 1, 1, 7});
  LlamaConfig mistral = small(LlamaVariant::Mistral);
  mistral.sliding_window = 4;  // shorter than the sequence: decoding must drop old keys
  check_chunks(mistral, 2, {6, 1, 1, 1, 5});
  LlamaConfig qwen2 = small(LlamaVariant::Qwen2);
  qwen2.rope_scaling = {RopeScaling::Type::Llama3, 4.0, 1.0, 4.0, 8};
  check_chunks(qwen2, 1, {2, 9, 1});
}

// bf16 compute (the trainer's LowPrecisionScope) and a bf16 model decoding: RoPE's tables stay
// f32, the loss is the f32 loss to bf16 accuracy, and the decoded logits follow the f32 ones.
TEST(Llama, HalfPrecisionTrainingAndDecoding) {
  LlamaConfig c = small(LlamaVariant::Mistral);
  c.sliding_window = 6;
  c.initializer_range = 0.05;
  Generator g(13);
  auto model = Llama::random(c, g);
  Tensor ids = tokens(2, 11, 3), targets = tokens(2, 11, 4);
  const double f32_loss = model->loss(ids, targets).item();
  {
    nn::LowPrecisionScope scope(*model, DType::BF16);
    Tensor loss = model->loss(ids, targets);
    EXPECT_NEAR(loss.item(), f32_loss, 2e-2 * f32_loss);
    autograd::backward(loss);
  }
  for (auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().dtype(), DType::F32) << name;
    for (double v : p.grad().to_vector<double>()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
  autograd::NoGradGuard no_grad;
  model->eval();
  Tensor want = model->forward(ids);
  model->to(DType::BF16);
  KVCache cache = model->make_cache(2);
  EXPECT_EQ(cache.dtype(), DType::BF16);
  model->forward_step(ids.slice(1, 0, 8), cache);
  Tensor got = model->forward_step(ids.slice(1, 8, 11), cache).to(DType::F32);
  std::vector<double> a = got.to_vector<double>(), b = want.slice(1, 8, 11).to_vector<double>();
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  EXPECT_LT(diff, 5e-2 * tessel::test::max_abs_of(b));
}

TEST(Llama, CacheAndStepChecks) {
  LlamaConfig c = small();
  Generator g(2);
  auto model = Llama::random(c, g);
  autograd::NoGradGuard no_grad;
  EXPECT_THROW(model->make_cache(1, 33), Error);
  KVCache cache = model->make_cache(1, 4);
  EXPECT_THROW(model->forward_step(tokens(1, 5, 1), cache), Error);  // past the capacity
  KVCache two = model->make_cache(2);
  EXPECT_THROW(model->forward_step(tokens(1, 2, 1), two), Error);  // batch mismatch
  // A cache of every query head (not the KV heads) is refused.
  KVCache wrong(3, 1, 8, 4, 6);
  EXPECT_THROW(model->forward_step(tokens(1, 2, 1), wrong), Error);
}

}  // namespace
}  // namespace tessel::models
