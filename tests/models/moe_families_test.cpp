// SPDX-License-Identifier: Apache-2.0
// The two mixture-of-experts families: registered, listed with their presets and found from a
// config.json; GPT-2-MoE's config keys round-trip (every other block an MoE layer, PR-MoE's
// pyramid and residual form) and bad values fail with one Error naming the key; parameter counts
// equal the built modules'; and greedy decoding through the KV cache equals the argmax of the
// uncached forward over the whole sequence, for GPT-2-MoE (with dropping configured: eval computes
// every pair) and Mixtral.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tessel/autograd/grad_mode.h"
#include "tessel/models/family.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"
#include "tessel/models/mixtral/mixtral_family.h"

namespace tessel::models {
namespace {

GPT2Config small_gpt2_moe() {
  GPT2Config c;
  c.vocab_size = 61;
  c.n_positions = 32;
  c.n_embd = 14;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_inner = 13;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  c.moe.num_experts = 5;
  c.moe.top_k = 2;
  c.moe.capacity_factor = 0.5;  // drops in training
  c.moe.z_loss_coef = 0.001;
  return c;
}

LlamaConfig small_mixtral() {
  LlamaConfig c = mixtral_preset("tiny");
  c.vocab_size = 67;
  c.hidden = 22;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 6;
  c.intermediate_size = 13;
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 32;
  c.num_local_experts = 5;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

// The new ids of greedy decoding through the KV cache: a prefill, then one token per step.
std::vector<int64_t> cached_greedy(CausalLM& model, const std::vector<int64_t>& prompt,
                                   int64_t steps) {
  autograd::NoGradGuard no_grad;
  KVCache cache = model.make_cache(1);
  std::vector<int64_t> out;
  Tensor ids = from_data(prompt, Shape{1, int64_t(prompt.size())});
  for (int64_t s = 0; s < steps; ++s) {
    Tensor logits = model.forward_step(ids, cache, true).to(DType::F32);
    const float* p = logits.data<float>();
    const int64_t best = std::max_element(p, p + logits.numel()) - p;
    out.push_back(best);
    ids = from_data(std::vector<int64_t>{best}, Shape{1, 1});
  }
  return out;
}

TEST(MoEFamilies, RegisteredListedAndFoundFromConfigs) {
  EXPECT_EQ(family_named("mixtral").name(), "mixtral");
  EXPECT_EQ(family_named("gpt2-moe").name(), "gpt2-moe");
  const std::vector<std::string> presets = all_preset_names();
  for (const char* p :
       {"mixtral:tiny", "mixtral:mixtral-8x7b", "gpt2-moe:tiny", "gpt2-moe:tiny-pr"})
    EXPECT_NE(std::find(presets.begin(), presets.end(), p), presets.end()) << p;
  EXPECT_EQ(find_preset("tiny")->family().name(), "gpt2");  // bare names stay GPT-2's

  const GPT2Config g = small_gpt2_moe();
  ConfigPtr parsed = parse_model_config(g.to_json(), "gpt2-moe config");
  EXPECT_EQ(parsed->family().name(), "gpt2-moe");
  EXPECT_TRUE(parsed->same_shapes(g));
  EXPECT_TRUE(parsed->has_experts());
  const auto& back = dynamic_cast<const GPT2Config&>(*parsed);
  EXPECT_EQ(back.moe.experts_in(0), 0);
  EXPECT_EQ(back.moe.experts_in(1), 5);  // every other block, starting with the second
  EXPECT_EQ(back.moe.experts_in(2), 0);
  EXPECT_EQ(back.moe.z_loss_coef, 0.001);

  const LlamaConfig m = small_mixtral();
  ConfigPtr mixtral = parse_model_config(m.to_json(), "mixtral config");
  EXPECT_EQ(mixtral->family().name(), "mixtral");
  EXPECT_TRUE(mixtral->same_shapes(m));
  EXPECT_FALSE(parse_model_config(LlamaConfig::preset("tiny").to_json(), "llama")->has_experts());
}

TEST(MoEFamilies, PyramidAndResidualFormRoundTrip) {
  GPT2Config c = small_gpt2_moe();
  c.moe.num_experts = 0;
  c.moe.expert_counts = {3, 0, 7};
  c.moe.top_k = 1;
  c.moe.residual = true;
  c.validate();
  const auto back = GPT2Config::from_json(c.to_json(), "pyramid");
  EXPECT_EQ(back.moe.expert_counts, (std::vector<int64_t>{3, 0, 7}));
  EXPECT_TRUE(back.moe.residual);
  Generator gen(5);
  auto model = c.build_random(gen);
  EXPECT_EQ(model->parameter_count(), c.parameter_count());
  EXPECT_EQ(model->find("h.2.moe.experts.fc_weight").size(0), 7);
  EXPECT_TRUE(model->find("h.0.moe.dense.c_fc.weight").defined());
}

TEST(MoEFamilies, BadExpertSettingsFailNamingTheKey) {
  struct Case {
    std::string json, expect;
  };
  const std::string head =
      R"({"model_type": "gpt2_moe", "vocab_size": 61, "n_positions": 32, "n_embd": 14,
          "n_layer": 3, "n_head": 2, )";
  for (const Case& c : {
           Case{head + R"("num_experts": 2, "top_k": 3})", "'top_k' 3 exceeds 'num_experts' 2"},
           Case{head + R"("num_experts": 4, "capacity_factor": 0})", "'capacity_factor' 0"},
           Case{head + R"("num_experts": 4, "capacity_factor": -1})", "'capacity_factor' -1"},
           Case{head + R"("top_k": 1})", "needs 'num_experts'"},
           Case{head + R"("num_experts": 4, "moe_every": 5})", "'moe_every' 5"},
           Case{head + R"("expert_counts": [0, 4]})", "'expert_counts' has 2 entries"},
           Case{head + R"("num_experts": 4, "top_k": 2, "moe_residual": true})",
                "'moe_residual' needs 'top_k' 1"},
           Case{head + R"("num_experts": 4, "gate_form": "noisy"})", "'gate_form'"},
       }) {
    try {
      parse_model_config(c.json, "bad.json");
      ADD_FAILURE() << "accepted " << c.json;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    }
  }
  LlamaConfig m = small_mixtral();
  m.num_experts_per_tok = 6;
  EXPECT_THROW(
      {
        try {
          m.validate();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("'num_experts_per_tok' 6 exceeds "
                                               "'num_local_experts' 5"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

TEST(MoEFamilies, ParameterCountsAndFlopsCountActiveExperts) {
  Generator gen(3);
  const GPT2Config g = small_gpt2_moe();
  EXPECT_EQ(g.build_random(gen)->parameter_count(), g.parameter_count());
  const LlamaConfig m = small_mixtral();
  EXPECT_EQ(m.build_random(gen)->parameter_count(), m.parameter_count());
  // Top-k of E experts: the FLOPs of a model whose MoE blocks had k experts.
  GPT2Config k_only = g;
  k_only.moe.num_experts = g.moe.top_k;
  EXPECT_DOUBLE_EQ(g.flops_per_token(16),
                   k_only.flops_per_token(16) + 6.0 * double((g.moe.num_experts - g.moe.top_k) *
                                                             g.n_embd));  // the wider router
}

TEST(MoEFamilies, FullRecomputeIsRefusedForExpertBlocks) {
  Generator gen(4);
  auto model = small_gpt2_moe().build_random(gen);
  EXPECT_THROW(model->set_recompute(nn::Recompute::Full), Error);
  model->set_recompute(nn::Recompute::Selective);  // attention only: allowed
}

TEST(MoEFamilies, Gpt2MoEGreedyCachedEqualsUncachedArgmax) {
  Generator gen(11);
  auto model = small_gpt2_moe().build_random(gen);
  model->eval();
  const std::vector<int64_t> prompt = {3, 17, 5, 40, 2, 9, 33};
  const std::vector<int64_t> recomputed = model->generate_greedy(prompt, 12);
  EXPECT_EQ(cached_greedy(*model, prompt, 12), recomputed);
  const std::vector<ExpertLayerStats> stats = model->expert_stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].layer, 1);
  EXPECT_EQ(stats[0].stats.dropped, 0);  // eval computes every pair

  // In training the same capacity factor drops pairs, and the auxiliary loss is collected.
  model->train();
  Tensor ids = from_data(std::vector<int64_t>(24, 7), Shape{2, 12});
  model->forward(ids);
  EXPECT_GT(model->expert_stats()[0].stats.dropped, 0);
  ASSERT_TRUE(model->auxiliary_loss().defined());
  EXPECT_GT(model->auxiliary_loss().item(), 0.0);
}

TEST(MoEFamilies, MixtralGreedyCachedEqualsUncachedArgmax) {
  Generator gen(12);
  auto model = small_mixtral().build_random(gen);
  model->eval();
  const std::vector<int64_t> prompt = {3, 17, 5, 40, 2, 9, 33};
  EXPECT_EQ(cached_greedy(*model, prompt, 12), model->generate_greedy(prompt, 12));
}

}  // namespace
}  // namespace tessel::models
