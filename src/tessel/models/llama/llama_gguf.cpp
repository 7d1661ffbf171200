// SPDX-License-Identifier: Apache-2.0
// LLaMA in GGUF: the llama.* keys <-> LlamaConfig, tessel's parameter names <-> GGUF's, and the q/k
// row permutation. GGUF files keep q and k in Meta's original layout, where RoPE rotates adjacent
// features; tessel (like Hugging Face) rotates feature i with i + head_dim / 2, so the rows of
// q_proj and k_proj (and their biases) are reordered per head on export and back on load. Only
// the "llama" architecture with default or linear RoPE scaling has a GGUF form here; Mistral's
// window, Qwen2 and the llama3 / dynamic scalings are refused by name rather than written wrong.
// Mixtral is stored as llama.cpp stores it: architecture "llama" with llama.expert_count and
// llama.expert_used_count, the router as blk.N.ffn_gate_inp.weight and each projection's experts
// as one stacked tensor, blk.N.ffn_{gate,up,down}_exps.weight (GGUF dims [in, out, experts]: the
// same bytes as tessel's [experts, out, in] stack).
#include "tessel/models/llama/llama_gguf.h"

#include <cstring>
#include <map>
#include <regex>

#include "tessel/core/error.h"
#include "tessel/models/gguf_layout.h"
#include "tessel/models/gguf_model.h"
#include "tessel/models/llama/llama.h"

namespace tessel::models {

namespace {

constexpr const char* kArch = "llama";

std::string key(const char* suffix) {
  return std::string(kArch) + "." + suffix;
}

const Llama& as_llama(const CausalLM& model) {
  const auto* m = dynamic_cast<const Llama*>(&model);
  TESSEL_CHECK(m != nullptr, "LLaMA GGUF: model '", model.type_name(), "' is not a LLaMA");
  return *m;
}

// Heads whose rows a parameter holds in RoPE order (q: attention heads, k: KV heads), or 0.
int64_t rope_heads(const LlamaConfig& c, const std::string& name) {
  if (name.find(".self_attn.q_proj.") != std::string::npos) return c.num_attention_heads;
  if (name.find(".self_attn.k_proj.") != std::string::npos) return c.num_key_value_heads;
  return 0;
}

}  // namespace

std::string llama_gguf_name(const std::string& name) {
  static const std::map<std::string, std::string> kTop = {
      {"embed_tokens.weight", "token_embd.weight"},
      {"norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  static const std::map<std::string, std::string> kBlock = {
      {"input_layernorm", "attn_norm"},    {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  if (auto it = kTop.find(name); it != kTop.end()) return it->second;
  static const std::map<std::string, std::string> kExperts = {
      {"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"}, {"down_proj", "ffn_down_exps"}};
  static const std::regex experts(R"(layers\.(\d+)\.block_sparse_moe\.experts\.(\w+))");
  static const std::regex router(R"(layers\.(\d+)\.block_sparse_moe\.router\.weight)");
  static const std::regex pattern(R"(layers\.(\d+)\.(.+)\.(weight|bias))");
  std::smatch m;
  if (std::regex_match(name, m, experts)) {
    if (auto it = kExperts.find(m[2].str()); it != kExperts.end())
      return "blk." + m[1].str() + "." + it->second + ".weight";
  }
  if (std::regex_match(name, m, router)) return "blk." + m[1].str() + ".ffn_gate_inp.weight";
  if (std::regex_match(name, m, pattern)) {
    if (auto it = kBlock.find(m[2].str()); it != kBlock.end())
      return "blk." + m[1].str() + "." + it->second + "." + m[3].str();
  }
  TESSEL_FAIL("LLaMA GGUF: no GGUF name for parameter '", name, "'");
}

Tensor llama_permute_rope_rows(const Tensor& w, int64_t n_heads, bool to_interleaved) {
  const int64_t rows = w.size(0);
  TESSEL_CHECK(n_heads > 0 && rows % (2 * n_heads) == 0, "LLaMA GGUF: ", rows,
               " rows do not split into ", n_heads, " heads of an even size");
  const int64_t head_dim = rows / n_heads, half = head_dim / 2;
  const size_t row_bytes = w.nbytes() / size_t(rows);
  const Tensor& src = w;  // tensors are always contiguous
  Tensor out = empty(w.shape(), w.dtype());
  const auto* from = static_cast<const uint8_t*>(src.data_ptr());
  auto* to = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t pair = 0; pair < 2; ++pair)
      for (int64_t i = 0; i < half; ++i) {
        const int64_t rotate_half_row = h * head_dim + pair * half + i;
        const int64_t interleaved_row = h * head_dim + 2 * i + pair;
        const int64_t s = to_interleaved ? rotate_half_row : interleaved_row;
        const int64_t d = to_interleaved ? interleaved_row : rotate_half_row;
        std::memcpy(to + size_t(d) * row_bytes, from + size_t(s) * row_bytes, row_bytes);
      }
  return out;
}

ConfigPtr llama_config_from_gguf(const io::GgufFile& file) {
  auto c = std::make_shared<LlamaConfig>();
  c->variant = LlamaVariant::Llama;
  // A mixture of experts (llama.cpp writes Mixtral as "llama" with an expert count).
  if (const int64_t experts = gguf_optional_int(file, key("expert_count")).value_or(0);
      experts > 0) {
    c->variant = LlamaVariant::Mixtral;
    c->sliding_window = 0;
    c->num_local_experts = experts;
    c->num_experts_per_tok = gguf_int(file, key("expert_used_count"));
  }
  c->max_position_embeddings = gguf_int(file, key("context_length"));
  c->hidden = gguf_int(file, key("embedding_length"));
  c->num_hidden_layers = gguf_int(file, key("block_count"));
  c->intermediate_size = gguf_int(file, key("feed_forward_length"));
  c->num_attention_heads = gguf_int(file, key("attention.head_count"));
  c->num_key_value_heads =
      gguf_optional_int(file, key("attention.head_count_kv")).value_or(c->num_attention_heads);
  TESSEL_CHECK(c->num_attention_heads > 0, file.path(), ": ", key("attention.head_count"), " = ",
               c->num_attention_heads, " must be positive");
  c->head_dim = gguf_optional_int(file, key("attention.key_length"))
                    .value_or(c->hidden / c->num_attention_heads);
  if (auto rope_dims = gguf_optional_int(file, key("rope.dimension_count")))
    TESSEL_CHECK(*rope_dims == c->head_dim, file.path(), ": ", key("rope.dimension_count"), " = ",
                 *rope_dims, " differs from the head size ", c->head_dim,
                 " (partial rotary embeddings are not supported)");
  c->rms_norm_eps = file.metadata()
                        .at(key("attention.layer_norm_rms_epsilon"), file.path())
                        .as_double(file.path() + ": " + key("attention.layer_norm_rms_epsilon"));
  c->rope_theta = gguf_float(file, key("rope.freq_base"), 10000.0);
  if (const io::GgufValue* t = file.metadata().find(key("rope.scaling.type"))) {
    const std::string type = t->as_string(file.path() + ": " + key("rope.scaling.type"));
    TESSEL_CHECK(type == "none" || type == "linear", file.path(), ": ", key("rope.scaling.type"),
                 " '", type, "' is not supported (none, linear)");
    if (type == "linear") {
      c->rope_scaling.type = RopeScaling::Type::Linear;
      c->rope_scaling.factor = gguf_float(file, key("rope.scaling.factor"), 1.0);
    }
  }
  TESSEL_CHECK(file.contains("token_embd.weight"), file.path(),
               ": tensor token_embd.weight is missing");
  c->vocab_size = file.info("token_embd.weight").shape()[0];
  if (auto v = gguf_optional_int(file, key("vocab_size"))) c->vocab_size = *v;
  c->tie_word_embeddings = !file.contains("output.weight");
  c->attention_bias = file.contains("blk.0.attn_q.bias");
  c->mlp_bias = file.contains("blk.0.ffn_gate.bias");
  c->bos_token_id = gguf_token_id(file, "bos");
  if (auto id = gguf_token_id(file, "eos"))
    c->eos_token_ids = {*id};
  else
    c->eos_token_ids.clear();
  return c;
}

void llama_config_to_gguf(const ModelConfig& config, io::GgufMetadata& out) {
  const auto* c = dynamic_cast<const LlamaConfig*>(&config);
  TESSEL_CHECK(c != nullptr, "LLaMA GGUF: the config is not a LLaMA's");
  TESSEL_CHECK(c->variant == LlamaVariant::Llama || c->variant == LlamaVariant::Mixtral,
               "GGUF export of ", llama_architecture(c->variant),
               " is not supported yet (LlamaForCausalLM and MixtralForCausalLM are)");
  TESSEL_CHECK(c->sliding_window == 0, "GGUF export: sliding_window ", c->sliding_window,
               " is not supported (llama.cpp's llama architecture has no window)");
  const RopeScaling::Type scaling = c->rope_scaling.type;
  TESSEL_CHECK(scaling == RopeScaling::Type::Default || scaling == RopeScaling::Type::Linear,
               "GGUF export: rope_scaling '", rope_type_name(scaling),
               "' is not supported yet (default and linear are)");
  // The hyper-parameters are u32, as llama.cpp writes them and requires them (it refuses a u64
  // context_length).
  auto u32 = [](int64_t v) {
    TESSEL_CHECK(v >= 0 && v <= int64_t(UINT32_MAX), "GGUF export: ", v, " does not fit in u32");
    return io::GgufValue::of(io::GgufType::U32, uint64_t(v));
  };
  auto f32 = [](double v) { return io::GgufValue::of_float(io::GgufType::F32, v); };
  out.set(key("context_length"), u32(c->max_position_embeddings));
  out.set(key("embedding_length"), u32(c->hidden));
  out.set(key("block_count"), u32(c->num_hidden_layers));
  out.set(key("feed_forward_length"), u32(c->intermediate_size));
  out.set(key("attention.head_count"), u32(c->num_attention_heads));
  out.set(key("attention.head_count_kv"), u32(c->num_key_value_heads));
  out.set(key("attention.key_length"), u32(c->head_dim));
  out.set(key("attention.value_length"), u32(c->head_dim));
  out.set(key("attention.layer_norm_rms_epsilon"), f32(c->rms_norm_eps));
  out.set(key("rope.dimension_count"), u32(c->head_dim));
  out.set(key("rope.freq_base"), f32(c->rope_theta));
  out.set(key("vocab_size"), u32(c->vocab_size));
  if (c->variant == LlamaVariant::Mixtral) {
    out.set(key("expert_count"), u32(c->num_local_experts));
    out.set(key("expert_used_count"), u32(c->num_experts_per_tok));
  }
  if (scaling == RopeScaling::Type::Linear) {
    out.set(key("rope.scaling.type"), io::GgufValue::of_string("linear"));
    out.set(key("rope.scaling.factor"), f32(c->rope_scaling.factor));
  }
}

io::NamedTensors llama_to_gguf(const CausalLM& model) {
  const Llama& llama = as_llama(model);
  io::NamedTensors out;
  for (auto& [name, t] : llama.state_dict()) {
    const int64_t heads = rope_heads(llama.config(), name);
    out.emplace_back(llama_gguf_name(name),
                     heads > 0 ? llama_permute_rope_rows(t, heads, true) : t);
  }
  return out;
}

void llama_load_gguf(CausalLM& model, const io::GgufFile& file) {
  const LlamaConfig& config = as_llama(model).config();
  load_gguf_tensors(model, file, "load LLaMA GGUF", llama_gguf_name,
                    [&](const std::string& name, const Tensor& t) {
                      const int64_t heads = rope_heads(config, name);
                      return heads > 0 ? llama_permute_rope_rows(t, heads, false) : t;
                    });
}

GgufLayout llama_gguf_layout(const CausalLM& model, const io::GgufFile& file) {
  const LlamaConfig& config = as_llama(model).config();
  return make_gguf_layout(model, file, "load LLaMA GGUF", llama_gguf_name,
                          [&](const std::string& name) { return rope_heads(config, name); });
}

}  // namespace tessel::models
