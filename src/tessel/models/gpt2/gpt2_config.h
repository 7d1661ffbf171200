// SPDX-License-Identifier: Apache-2.0
// GPT-2's hyper-parameters, read from a Hugging Face config.json (GPT2Config keys and their
// aliases) and written back in the same form, plus the four published sizes. Unknown keys are
// ignored as Hugging Face does; known keys are type- and range-checked, and settings tessel does
// not implement (another activation, per-layer attention scaling, reordered upcast) are errors.
// With model_type "gpt2_moe" (architecture GPT2MoELMHeadModel) the config also carries the
// experts (gpt2_moe.h) and belongs to the GPT-2-MoE family.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessel/models/causal_lm.h"
#include "tessel/models/gpt2/gpt2_block.h"
#include "tessel/models/gpt2/gpt2_moe.h"

namespace tessel::models {

struct GPT2Config : ModelConfig {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0 (null in JSON): 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  double resid_pdrop = 0.1, embd_pdrop = 0.1, attn_pdrop = 0.1;
  double initializer_range = 0.02;
  bool tie_word_embeddings = true;
  int64_t bos_token_id = 50256, eos_token_id = 50256;
  GPT2MoESettings moe;  // GPT-2-MoE; disabled: dense GPT-2

  // Parses config.json text; `what` names the source in errors.
  static GPT2Config from_json(const std::string& text, const std::string& what = "config.json");
  static GPT2Config from_file(const std::string& path);
  // The four published sizes under both names people use: the parameter count and the Hugging
  // Face checkpoint's size word: "124M" / "small" (gpt2), "355M" / "medium", "774M" / "large",
  // "1558M" / "xl" ("1.5B" also accepted); and tessel's "tiny" (4 x 192, about 11.5M parameters,
  // most in wte: the default of `tessel train`).
  static GPT2Config preset(const std::string& name);
  // The names preset() takes, as docs/TRAINING.md lists them.
  static const std::vector<std::string>& preset_names();

  int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  // Block `layer`'s config (its MoE layer, if any, from `moe`).
  GPT2BlockConfig block_config(int64_t layer = 0) const;
  // Parameters of block `layer`'s MLP or MoE layer: all of them, and those one token's forward
  // multiplies with (top_k experts, the router and PR-MoE's dense MLP).
  int64_t ffn_parameter_count(int64_t layer) const;
  int64_t ffn_active_parameter_count(int64_t layer) const;

  // ModelConfig (gpt2_config.cpp, gpt2_family.cpp).
  const Family& family() const override;
  std::string to_json() const override;  // config.json in the Hugging Face layout
  void validate() const override;
  std::string summary() const override;
  bool same_shapes(const ModelConfig& other) const override;
  bool same_experts(const GPT2Config& other) const;  // the same MoE blocks and expert counts
  int64_t vocabulary_size() const override { return vocab_size; }
  int64_t max_positions() const override { return n_positions; }
  int64_t num_layers() const override { return n_layer; }
  int64_t hidden_size() const override { return n_embd; }
  int64_t num_heads() const override { return n_head; }
  int64_t parameter_count() const override;
  bool has_experts() const override { return moe.enabled(); }
  KvGeometry kv_geometry() const override { return {n_layer, n_head, n_embd / n_head}; }
  std::optional<int64_t> bos_id() const override { return bos_token_id; }
  std::optional<int64_t> eos_id() const override { return eos_token_id; }
  // 6 x the parameters the forward multiplies with (all but wpe) + 6 L C T for the attention.
  double flops_per_token(int64_t seq_len) const override;
  // none: 0; selective: every layer's ln_1, fused QKV projection and attention core; full: every
  // block's parameters and its attention (embeddings, ln_f and the LM head run once).
  double recompute_flops_per_token(nn::Recompute mode, int64_t seq_len) const override;
  std::shared_ptr<CausalLM> build_random(Generator& generator) const override;
  std::shared_ptr<CausalLM> build_empty(Generator* dropout_generator = nullptr) const override;
  // Megatron-LM's split (configs/gpt2-tp.json): n_head must divide by tp, the head tied.
  TensorParallelSpec tensor_parallel(int tp) const override;
};

}  // namespace tessel::models
