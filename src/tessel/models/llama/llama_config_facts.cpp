// SPDX-License-Identifier: Apache-2.0
// LlamaConfig's presets and the facts computed from a config without building the model:
// parameters, KV-cache geometry, FLOPs per token (with what each recompute mode repeats) and the
// tensor-parallel plan.
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/models/llama/llama_config.h"

namespace tessel::models {

namespace {

struct Dims {
  int64_t vocab, hidden, inter, layers, heads, kv_heads, max_pos;
};

LlamaConfig shaped(LlamaVariant variant, const Dims& s, double eps, double theta, bool tied,
                   std::optional<int64_t> bos, int64_t eos) {
  LlamaConfig c;
  c.variant = variant;
  c.vocab_size = s.vocab;
  c.hidden = s.hidden;
  c.intermediate_size = s.inter;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.hidden / s.heads;
  c.max_position_embeddings = s.max_pos;
  c.rms_norm_eps = eps;
  c.rope_theta = theta;
  c.tie_word_embeddings = tied;
  c.bos_token_id = bos;
  c.eos_token_ids = {eos};
  return c;
}

}  // namespace

LlamaConfig LlamaConfig::preset(const std::string& name) {
  using V = LlamaVariant;
  LlamaConfig c;
  if (name == "tiny") {
    // GPT-2 tiny's width, depth and vocabulary (GPT-2's tokenizer, <|endoftext|> = 50256) with
    // grouped-query attention and a SwiGLU MLP of about 8/3 the width: 11.2M parameters.
    c = shaped(V::Llama, {50257, 192, 512, 4, 6, 2, 256}, 1e-5, 10000.0, true, 50256, 50256);
  } else if (name == "smollm-135m") {  // HuggingFaceTB/SmolLM-135M
    c = shaped(V::Llama, {49152, 576, 1536, 30, 9, 3, 2048}, 1e-5, 10000.0, true, 0, 0);
  } else if (name == "tinyllama-1.1b") {  // TinyLlama/TinyLlama-1.1B-Chat-v1.0
    c = shaped(V::Llama, {32000, 2048, 5632, 22, 32, 4, 2048}, 1e-5, 10000.0, false, 1, 2);
  } else if (name == "llama2-7b") {  // meta-llama/Llama-2-7b-hf
    c = shaped(V::Llama, {32000, 4096, 11008, 32, 32, 32, 4096}, 1e-5, 10000.0, false, 1, 2);
  } else if (name == "llama3.2-1b") {  // meta-llama/Llama-3.2-1B
    c = shaped(V::Llama, {128256, 2048, 8192, 16, 32, 8, 131072}, 1e-5, 500000.0, true, 128000,
               128001);
    c.rope_scaling = {RopeScaling::Type::Llama3, 32.0, 1.0, 4.0, 8192, false};
  } else if (name == "mistral-7b") {  // mistralai/Mistral-7B-v0.1
    c = shaped(V::Mistral, {32000, 4096, 14336, 32, 32, 8, 32768}, 1e-5, 10000.0, false, 1, 2);
    c.sliding_window = 4096;
  } else if (name == "qwen2-0.5b") {  // Qwen/Qwen2-0.5B
    c = shaped(V::Qwen2, {151936, 896, 4864, 24, 14, 2, 131072}, 1e-6, 1000000.0, true, 151643,
               151643);
    c.qwen2_sliding_window = 131072;
    c.max_window_layers = 24;
  } else {
    std::string names;
    for (const std::string& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    TESSEL_FAIL("LLaMA preset '", name, "' is unknown (presets: ", names, ")");
  }
  c.validate();
  return c;
}

const std::vector<std::string>& LlamaConfig::preset_names() {
  static const std::vector<std::string> names = {"tiny",      "smollm-135m", "tinyllama-1.1b",
                                                 "llama2-7b", "llama3.2-1b", "mistral-7b",
                                                 "qwen2-0.5b"};
  return names;
}

int64_t LlamaConfig::layer_parameter_count() const {
  const int64_t c = hidden, q = q_width(), kv = kv_width(), i = intermediate_size;
  int64_t n = 2 * c;                // input_layernorm, post_attention_layernorm
  n += c * q + 2 * c * kv + q * c;  // q, k, v, o
  if (qkv_bias()) n += q + 2 * kv;
  if (o_bias()) n += c;
  if (is_moe()) {
    n += num_local_experts * (3 * c * i + c);  // every expert's w1, w3, w2 and its router row
  } else {
    n += 3 * c * i;  // gate, up, down
  }
  if (mlp_biases()) n += 2 * i + c;
  return n;
}

int64_t LlamaConfig::layer_active_parameter_count() const {
  if (!is_moe()) return layer_parameter_count();
  // A token runs num_experts_per_tok experts and the whole router.
  const int64_t c = hidden, i = intermediate_size;
  return layer_parameter_count() - (num_local_experts - num_experts_per_tok) * 3 * c * i;
}

int64_t LlamaConfig::parameter_count() const {
  int64_t n = vocab_size * hidden + num_hidden_layers * layer_parameter_count() + hidden;
  if (!tie_word_embeddings) n += vocab_size * hidden;
  return n;
}

KvGeometry LlamaConfig::kv_geometry() const {
  return {num_hidden_layers, num_key_value_heads, head_dim};
}

double LlamaConfig::attention_span(int64_t seq_len) const {
  const double t = double(seq_len), w = double(window());
  if (w <= 0 || w >= t) return t;
  return 2.0 * w - w * w / t;
}

double LlamaConfig::flops_per_token(int64_t seq_len) const {
  TESSEL_CHECK(seq_len >= 1, "flops_per_token: seq_len ", seq_len, " must be >= 1");
  // Every parameter multiplies once per token in the forward except an untied embedding, which
  // is only looked up (the tied one is the LM head's matrix). Attention: scores and weighted sums
  // over the q width, as GPT-2 counts them (6 L C T for causal attention).
  const double inactive =
      double(num_hidden_layers) * double(layer_parameter_count() - layer_active_parameter_count());
  const double matmul_params =
      double(parameter_count() - (tie_word_embeddings ? 0 : vocab_size * hidden)) - inactive;
  return 6.0 * matmul_params +
         6.0 * double(num_hidden_layers) * double(q_width()) * attention_span(seq_len);
}

double LlamaConfig::recompute_flops_per_token(nn::Recompute mode, int64_t seq_len) const {
  TESSEL_CHECK(seq_len >= 1, "recompute_flops_per_token: seq_len ", seq_len, " must be >= 1");
  // Counted as GPT-2 counts them: 2 FLOPs per parameter per token, 2 x (q width) x T for the
  // attention forward, a norm counted as its parameters.
  const double c = double(hidden), q = double(q_width()), kv = double(kv_width());
  const double layers = double(num_hidden_layers);
  const double attention = 2.0 * q * attention_span(seq_len);
  const double norm = c;
  const double qkv = c * (q + 2.0 * kv) + (qkv_bias() ? q + 2.0 * kv : 0.0);
  switch (mode) {
    case nn::Recompute::None:
      return 0.0;
    case nn::Recompute::Selective:  // input_layernorm, q/k/v (and RoPE) and the attention core
      return layers * (2.0 * (norm + qkv) + attention);
    case nn::Recompute::Full:
      return layers * (2.0 * double(layer_active_parameter_count()) + attention);
  }
  TESSEL_FAIL("recompute_flops_per_token: unknown mode ", int(mode));
}

TensorParallelSpec LlamaConfig::tensor_parallel(int tp) const {
  TESSEL_CHECK(tp >= 1, "tensor parallelism: tp = ", tp, " must be >= 1");
  // Mixtral: the plan splits attention; no rule matches block_sparse_moe (router and experts),
  // which every tp rank holds whole (docs/MOE.md, "ep with tp").
  TESSEL_CHECK(num_attention_heads % tp == 0,
               "tensor parallelism: num_attention_heads = ", num_attention_heads,
               " is not divisible by tp = ", tp, " (attention is split per head)");
  // KV heads split over tp, or (fewer of them than ranks) each replicated over tp / kv ranks,
  // whose query heads then all read it.
  const bool replicate_kv = num_key_value_heads < tp;
  TESSEL_CHECK(replicate_kv ? tp % num_key_value_heads == 0 : num_key_value_heads % tp == 0,
               "tensor parallelism: num_key_value_heads = ", num_key_value_heads, " and tp = ", tp,
               replicate_kv ? ": tp must be a multiple of the KV heads to replicate them"
                            : ": the KV heads must divide by tp (k_proj and v_proj are split "
                              "per KV head)");
  TESSEL_CHECK(intermediate_size >= tp && hidden >= tp, "tensor parallelism: tp = ", tp,
               " exceeds hidden_size ", hidden, " or intermediate_size ", intermediate_size);
  TESSEL_CHECK(tie_word_embeddings || vocab_size % tp == 0, "tensor parallelism: the untied ",
               "lm_head's vocab_size ", vocab_size, " is not divisible by tp = ", tp,
               " (its rows are split evenly; only the embedding can be padded)");
  nlohmann::ordered_json plan;
  plan["# about"] =
      "LLaMA's tensor-parallel plan (Megatron-LM): vocab-split embedding, q/k/v per head "
      "(k/v heads replicated when fewer than tp), "
      "Colwise then Rowwise in attention and MLP; with --sp the norms and residuals run on "
      "sequence pieces";
  plan["embed_tokens"] = "VocabParallel";
  plan["layers.*.input_layernorm"] = "Sequence";
  plan["layers.*.self_attn.q_proj"] = {{"style", "Colwise"}, {"unit", "head_dim"}};
  for (const char* p : {"k_proj", "v_proj"}) {
    nlohmann::ordered_json rule = {{"style", "Colwise"}, {"unit", "head_dim"}};
    if (replicate_kv) rule["replicate"] = true;
    plan[std::string("layers.*.self_attn.") + p] = rule;
  }
  plan["layers.*.self_attn.o_proj"] = "Rowwise";
  plan["layers.*.post_attention_layernorm"] = "Sequence";
  if (!is_moe()) {  // Mixtral's blocks have block_sparse_moe instead, held whole (above)
    plan["layers.*.mlp.gate_proj"] = "Colwise";
    plan["layers.*.mlp.up_proj"] = "Colwise";
    plan["layers.*.mlp.down_proj"] = "Rowwise";
  }
  TensorParallelSpec spec;
  if (tie_word_embeddings) {
    // The head multiplies with the embedding's vocabulary rows: the norm's output enters the
    // tensor-parallel region there (gathered along the sequence under --sp).
    plan["norm"] = {{"style", "Sequence"}, {"gather_output", true}};
    spec.vocab_parallel_weight = "embed_tokens.weight";
    spec.head_region_entry = "norm";
  } else {
    // lm_head's Colwise input is gathered (or enters through f) by the style itself.
    plan["norm"] = "Sequence";
    plan["lm_head"] = "Colwise";
    spec.vocab_parallel_weight = "lm_head.weight";
  }
  spec.plan_json = plan.dump(2) + "\n";
  spec.sizes = {{"head_dim", head_dim},
                {"hidden_size", hidden},
                {"num_attention_heads", num_attention_heads},
                {"num_key_value_heads", num_key_value_heads}};
  return spec;
}

}  // namespace tessel::models
