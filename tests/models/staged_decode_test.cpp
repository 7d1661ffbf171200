// SPDX-License-Identifier: Apache-2.0
// Pipelined cached decoding (models/staged_decode.h): running blocks [0, k) and then [k, L), each
// stage against a cache of only its own blocks, then the head, gives bitwise the logits of the
// whole forward_cached, for every cut k of GPT-2 and LLaMA (grouped-query heads) models of odd
// sizes, over a 7-token prefill and 1- and 5-token chunks after it; three stages too; a cache
// holding every block works for a stage; wrong depths and inputs are refused.
#include "tessel/models/staged_decode.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/lcg_ids.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"

namespace tessel::models {
namespace {

GPT2Config gpt2_config() {
  GPT2Config c;
  c.vocab_size = 37;
  c.n_positions = 33;
  c.n_embd = 21;
  c.n_head = 3;
  c.n_layer = 3;
  c.initializer_range = 0.2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return c;
}

LlamaConfig llama_config() {
  LlamaConfig c;
  c.vocab_size = 37;
  c.hidden = 24;
  c.intermediate_size = 13;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 6;
  c.max_position_embeddings = 33;
  c.initializer_range = 0.2;
  return c;
}

Tensor ids_of(int64_t b, int64_t t, uint64_t seed) {
  return test::lcg_ids(b, t, seed, 37);
}

KVCache stage_cache(const KVCache& whole, int64_t layers, int64_t batch) {
  return KVCache(layers, batch, whole.capacity(), whole.kv_heads(), whole.head_dim(),
                 whole.dtype());
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << what << " element " << i;
}

// The stage bounds `cuts` (0 < ... < L) against the whole model, over chunks of 7, 1 and 5 tokens
// for a batch of 2 (the last chunk asks for one row of each sequence).
template <class Model>
void check_stages(Model& model, const std::vector<int64_t>& cuts) {
  model.eval();
  autograd::NoGradGuard no_grad;
  const int64_t layers = model.num_layers(), batch = 2;
  std::vector<int64_t> bounds{0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(layers);
  KVCache whole = model.make_cache(batch);
  std::vector<KVCache> caches;
  for (size_t s = 0; s + 1 < bounds.size(); ++s)
    caches.push_back(stage_cache(whole, bounds[s + 1] - bounds[s], batch));
  uint64_t seed = 5;
  for (int64_t t : {7, 1, 5}) {
    const Tensor ids = ids_of(batch, t, seed++);
    Tensor rows;
    if (t == 5) rows = from_data(std::vector<int64_t>{4, 5 + 2}, Shape{2});
    const Tensor want = model.forward_cached(ids, whole, rows);
    whole.advance(t);
    Tensor x = ids;
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
      x = model.forward_cached_layers(bounds[s], bounds[s + 1], x, caches[s]);
      caches[s].advance(t);
    }
    expect_same(model.cached_head(x, rows), want, "chunk of " + std::to_string(t));
  }
}

TEST(StagedDecode, Gpt2EveryCutEqualsTheWholeForward) {
  for (int64_t k = 1; k < 3; ++k) {
    Generator g(11);
    auto model = GPT2::random(gpt2_config(), g);
    SCOPED_TRACE(k);
    check_stages(*model, {k});
  }
}

TEST(StagedDecode, LlamaEveryCutEqualsTheWholeForward) {
  for (int64_t k = 1; k < 4; ++k) {
    Generator g(12);
    auto model = Llama::random(llama_config(), g);
    SCOPED_TRACE(k);
    check_stages(*model, {k});
  }
}

TEST(StagedDecode, ThreeStages) {
  Generator g(13);
  auto llama = Llama::random(llama_config(), g);
  check_stages(*llama, {1, 3});
  auto gpt2 = GPT2::random(gpt2_config(), g);
  check_stages(*gpt2, {1, 2});
}

TEST(StagedDecode, AStageMayUseACacheOfEveryBlock) {
  Generator g(14);
  auto model = GPT2::random(gpt2_config(), g);
  model->eval();
  autograd::NoGradGuard no_grad;
  const Tensor ids = ids_of(1, 7, 3);
  KVCache whole = model->make_cache(1), shared = model->make_cache(1);
  const Tensor want = model->forward_cached(ids, whole);
  Tensor x = model->forward_cached_layers(0, 2, ids, shared);
  x = model->forward_cached_layers(2, 3, x, shared);
  expect_same(model->cached_head(x, Tensor()), want, "one cache of every block");
}

TEST(StagedDecode, RefusesWrongDepthsAndInputs) {
  Generator g(15);
  auto model = Llama::random(llama_config(), g);
  model->eval();
  autograd::NoGradGuard no_grad;
  const Tensor ids = ids_of(1, 3, 4);
  KVCache whole = model->make_cache(1);
  KVCache two = stage_cache(whole, 2, 1);
  EXPECT_THROW(model->forward_cached_layers(0, 3, ids, two), Error);    // 3 blocks, 2 layers
  EXPECT_THROW(model->forward_cached_layers(0, 5, ids, whole), Error);  // past the model
  EXPECT_THROW(model->forward_cached_layers(1, 3, ids, two), Error);    // ids where hidden is due
  const Tensor hidden = model->forward_cached_layers(0, 2, ids, two);
  EXPECT_THROW(model->forward_cached_layers(0, 2, hidden, two), Error);  // hidden for embedding
  EXPECT_THROW(model->forward_cached(ids, two), Error);                  // whole model, 2 layers
}

}  // namespace
}  // namespace tessel::models
