// SPDX-License-Identifier: Apache-2.0
// The hyper-parameters of the LLaMA family, one config behind Hugging Face's LlamaForCausalLM
// (model_type "llama"), MistralForCausalLM ("mistral"), Qwen2ForCausalLM ("qwen2") and
// MixtralForCausalLM ("mixtral", Jiang et al. 2024: the MLP replaced by a sparse mixture of
// SwiGLU experts, models/mixtral/ registers it as a family of its own): read from
// config.json, written back in the same layout, checked (an Error names the key and the value),
// and the facts the trainer, the partitioner and the server ask for (parameters, FLOPs, KV-cache
// geometry, the tensor-parallel plan).
//
// The three differ only in a few keys: Llama honours attention_bias (q, k, v and o biases) and
// mlp_bias; Mistral has sliding_window (null: none); Qwen2 always has q, k and v biases and no
// other, and its use_sliding_window must be false; Mixtral has sliding_window (absent or null:
// none) and its experts (num_local_experts, num_experts_per_tok, router_aux_loss_coef,
// output_router_logits; router_jitter_noise must be 0). Unknown keys are ignored as Hugging Face
// does. Required keys (every published config has them): vocab_size, hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, max_position_embeddings; the others
// take Hugging Face's defaults.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/models/causal_lm.h"
#include "tessel/nn/moe_config.h"

namespace tessel::models {

enum class LlamaVariant { Llama, Mistral, Qwen2, Mixtral };
// "LlamaForCausalLM" / "llama", ...
std::string_view llama_architecture(LlamaVariant variant);
std::string_view llama_model_type(LlamaVariant variant);

// config.json's rope_scaling (null: Default). The inverse frequencies each type gives are computed
// as transformers' modeling_rope_utils computes them (llama_rope.h); the attention scaling of
// all four is 1.
struct RopeScaling {
  enum class Type { Default, Linear, Dynamic, Llama3 };
  Type type = Type::Default;
  double factor = 1.0;                           // linear, dynamic, llama3
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3
  bool legacy_key = false;  // written as "type" (older configs) rather than "rope_type"
};
std::string_view rope_type_name(RopeScaling::Type type);

struct LlamaConfig : ModelConfig {
  LlamaVariant variant = LlamaVariant::Llama;
  int64_t vocab_size = 32000;
  int64_t hidden = 4096;  // "hidden_size" (the name of ModelConfig::hidden_size())
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 128;  // hidden / num_attention_heads unless the config says otherwise
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // Llama: q, k, v and o biases
  bool mlp_bias = false;        // Llama: gate, up and down biases
  int64_t sliding_window = 0;   // Mistral, Mixtral: keys per query (0: none, null in JSON)
  // Mixtral: experts per layer, experts per token, the weight of the load-balancing loss in
  // training (tessel's Switch form, docs/MOE.md), and Hugging Face's output_router_logits as read.
  int64_t num_local_experts = 8;
  int64_t num_experts_per_tok = 2;
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;
  // Qwen2's sliding-window keys, written back as read (use_sliding_window must be false).
  std::optional<int64_t> qwen2_sliding_window;
  int64_t max_window_layers = 0;
  std::optional<int64_t> bos_token_id = 1;
  std::vector<int64_t> eos_token_ids = {2};  // a list in JSON when eos_list
  bool eos_list = false;
  double initializer_range = 0.02;

  // Parses config.json text; `what` names the source in errors.
  static LlamaConfig from_json(const std::string& text, const std::string& what = "config.json");
  // tessel's "tiny" (4 x 192, GQA 6/2, about 11M parameters: GPT-2 tiny's size) and published
  // shapes (without weights): smollm-135m, tinyllama-1.1b, llama2-7b, llama3.2-1b, mistral-7b,
  // qwen2-0.5b. An Error lists them for any other name.
  static LlamaConfig preset(const std::string& name);
  static const std::vector<std::string>& preset_names();

  // What the variant computes with.
  bool qkv_bias() const;
  bool o_bias() const;
  bool mlp_biases() const;
  int64_t window() const {
    return variant == LlamaVariant::Mistral || variant == LlamaVariant::Mixtral ? sliding_window
                                                                                : 0;
  }
  bool is_moe() const { return variant == LlamaVariant::Mixtral; }
  // Mixtral's sparse MLP as the MoE layer computes it: softmax over the experts, top-k gates
  // renormalised, SwiGLU experts of intermediate_size, no capacity (no token is dropped).
  nn::MoEConfig moe_config() const;
  // Attention width: num_attention_heads x head_dim (may differ from hidden with head_dim set).
  int64_t q_width() const { return num_attention_heads * head_dim; }
  int64_t kv_width() const { return num_key_value_heads * head_dim; }
  // Parameters of one decoder layer (every expert), and those one token's forward multiplies
  // with (num_experts_per_tok experts and the router).
  int64_t layer_parameter_count() const;
  int64_t layer_active_parameter_count() const;

  // ModelConfig.
  const Family& family() const override;
  std::string to_json() const override;
  void validate() const override;
  std::string summary() const override;
  bool same_shapes(const ModelConfig& other) const override;
  int64_t vocabulary_size() const override { return vocab_size; }
  // max_position_embeddings; with dynamic NTK scaling, max_position_embeddings x factor (the
  // context the scaling is meant to reach: rotary embeddings have no hard limit).
  int64_t max_positions() const override;
  int64_t num_layers() const override { return num_hidden_layers; }
  int64_t hidden_size() const override { return hidden; }
  int64_t num_heads() const override { return num_attention_heads; }
  int64_t parameter_count() const override;
  bool has_experts() const override { return is_moe(); }
  KvGeometry kv_geometry() const override;
  std::optional<int64_t> bos_id() const override { return bos_token_id; }
  std::optional<int64_t> eos_id() const override;
  double flops_per_token(int64_t seq_len) const override;
  double recompute_flops_per_token(nn::Recompute mode, int64_t seq_len) const override;
  std::shared_ptr<CausalLM> build_random(Generator& generator) const override;
  std::shared_ptr<CausalLM> build_empty(Generator* dropout_generator = nullptr) const override;
  // Megatron-LM's plan (llama_config_facts.cpp): q/k/v Colwise per head, o Rowwise,
  // gate/up Colwise, down Rowwise, the embedding split by vocabulary; the tied head multiplies
  // with the vocab-split embedding, an untied lm_head is Colwise. KV heads fewer than tp are
  // replicated over tp / kv ranks each. Errors: heads not divisible by tp, KV heads neither
  // divisible by tp nor dividing it, an untied vocabulary not divisible by tp.
  TensorParallelSpec tensor_parallel(int tp) const override;

  // The attention FLOPs' sequence factor: seq_len, or with a sliding window w < seq_len the
  // average keys per query doubled (2w - w^2 / seq_len), so that causal attention stays 6 L C T.
  double attention_span(int64_t seq_len) const;
};

}  // namespace tessel::models
