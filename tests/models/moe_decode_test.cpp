// SPDX-License-Identifier: Apache-2.0
// Cached decoding of the mixture-of-experts families reads only the experts its tokens chose: a
// decode step of a batch of sequences through the KV cache gives bitwise the same logits after
// every expert that no token of the step selected (in any layer) has had all its weights set to
// NaN, which any read of them would spread to every logit. The step's tokens reach each chosen
// expert as one group of rows (one GEMM per expert over the whole batch), and a batched step
// equals each sequence decoded alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "tessel/autograd/grad_mode.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"
#include "tessel/models/mixtral/mixtral_family.h"
#include "tessel/nn/moe.h"

namespace tessel::models {
namespace {

std::shared_ptr<CausalLM> mixtral_model() {
  LlamaConfig c = mixtral_preset("tiny");
  c.vocab_size = 71;
  c.hidden = 22;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 6;
  c.intermediate_size = 13;
  c.num_hidden_layers = 3;
  c.max_position_embeddings = 40;
  c.num_local_experts = 8;
  c.num_experts_per_tok = 2;
  c.tie_word_embeddings = false;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  Generator g(21);
  auto model = Llama::random(c, g);
  model->eval();
  return model;
}

std::shared_ptr<CausalLM> gpt2_moe_model() {
  GPT2Config c;
  c.vocab_size = 71;
  c.n_positions = 40;
  c.n_embd = 14;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_inner = 13;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  c.moe.num_experts = 7;
  c.moe.top_k = 2;
  c.moe.capacity_factor = 0.5;  // drops in training; decoding computes every pair
  Generator g(22);
  auto model = GPT2::random(c, g);
  model->eval();
  return model;
}

std::vector<nn::MoE*> moe_layers(CausalLM& model) {
  std::vector<nn::MoE*> out;
  for (auto& [name, m] : model.named_modules())
    if (auto* moe = dynamic_cast<nn::MoE*>(m)) out.push_back(moe);
  return out;
}

// Every weight of expert e in `layer` (each stacked parameter's slice e) set to NaN.
void poison_expert(nn::MoE& layer, int64_t e) {
  for (auto& [name, p] : layer.experts->named_parameters())
    p.narrow(0, e, 1).fill(std::numeric_limits<double>::quiet_NaN());
}

Tensor ids_of(const std::vector<int64_t>& ids, int64_t b) {
  return from_data(ids, Shape{b, int64_t(ids.size()) / b});
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(DType::F32), y = b.to(DType::F32);
  return x.shape() == y.shape() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

void expect_reads_only_chosen_experts(CausalLM& model, int64_t experts) {
  autograd::NoGradGuard no_grad;
  const int64_t batch = 2;
  const std::vector<int64_t> prompts = {3, 17, 5, 40, 2, 9, 33, 1, 8, 8, 60, 12, 4, 29};
  KVCache cache = model.make_cache(batch, 32);
  model.forward_step(ids_of(prompts, batch), cache);
  const Tensor step = ids_of({11, 50}, batch);
  const Tensor before = model.forward_cached(step, cache);  // cache.length() is not advanced
  ASSERT_TRUE(std::isfinite(before.to(DType::F64).to_vector<double>()[0]));
  // The step's routing, before the single-sequence runs below route again.
  std::vector<nn::Routing> routing;
  for (nn::MoE* layer : moe_layers(model)) routing.push_back(layer->last_routing());

  // The batched step equals each sequence decoded alone (no expert's result depends on which
  // other tokens share its group).
  for (int64_t s = 0; s < batch; ++s) {
    KVCache one = model.make_cache(1, 32);
    model.forward_step(
        ids_of(std::vector<int64_t>(prompts.begin() + s * 7, prompts.begin() + (s + 1) * 7), 1),
        one);
    const std::vector<int64_t> token = {step.to_vector<int64_t>()[size_t(s)]};
    const Tensor alone = model.forward_cached(ids_of(token, 1), one).to(DType::F64);
    const Tensor row = before.narrow(0, s, 1).to(DType::F64);
    const std::vector<double> a = alone.to_vector<double>(), b = row.to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << "sequence " << s;
  }

  const std::vector<nn::MoE*> layers = moe_layers(model);
  ASSERT_EQ(layers.size(), routing.size());
  ASSERT_FALSE(layers.empty());
  int64_t poisoned = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const nn::Routing& r = routing[l];
    ASSERT_EQ(r.tokens, batch);
    ASSERT_EQ(r.dropped(), 0);
    // Each chosen expert owns one group of rows holding every pair the step routed to it.
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t pairs = std::count(r.choice.begin(), r.choice.end(), e);
      EXPECT_EQ(r.offsets[size_t(e + 1)] - r.offsets[size_t(e)], pairs) << "expert " << e;
      for (int64_t row = r.offsets[size_t(e)]; row < r.offsets[size_t(e + 1)]; ++row)
        EXPECT_EQ(r.expert_of_row[size_t(row)], e);
      if (pairs > 0) continue;
      poison_expert(*layers[l], e);
      ++poisoned;
    }
  }
  ASSERT_GE(poisoned, int64_t(layers.size()));  // k * batch < experts: some expert idles
  const Tensor after = model.forward_cached(step, cache);
  EXPECT_TRUE(bitwise_equal(after, before)) << poisoned << " unchosen experts were read";
}

TEST(MoEDecode, MixtralReadsOnlyTheChosenExperts) {
  auto model = mixtral_model();
  expect_reads_only_chosen_experts(*model, 8);
}

TEST(MoEDecode, Gpt2MoEReadsOnlyTheChosenExperts) {
  auto model = gpt2_moe_model();
  expect_reads_only_chosen_experts(*model, 7);
}

}  // namespace
}  // namespace tessel::models
