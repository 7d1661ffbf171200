// SPDX-License-Identifier: Apache-2.0
// The Mixtral family: registry facts, presets, and the Hugging Face checkpoint mapping of the
// stacked experts (one HF tensor per expert and projection).
#include "tessel/models/mixtral/mixtral_family.h"

#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "tessel/core/error.h"
#include "tessel/models/llama/llama_family.h"
#include "tessel/models/llama/llama_gguf.h"

namespace tessel::models {

namespace {

constexpr const char* kPrefix = "model.";

// A stacked expert weight: (its layer's "layers.N.block_sparse_moe.experts", projection).
bool match_experts(const std::string& name, std::string& base, std::string& hf_proj) {
  static const std::regex pattern(
      R"((layers\.\d+\.block_sparse_moe\.experts)\.(gate_proj|up_proj|down_proj))");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return false;
  base = m[1];
  hf_proj = m[2] == "gate_proj" ? "w1" : m[2] == "up_proj" ? "w3" : "w2";
  return true;
}

std::string strip_prefix(const std::string& raw) {
  return raw.rfind(kPrefix, 0) == 0 ? raw.substr(std::strlen(kPrefix)) : raw;
}

bool is_inv_freq_buffer(const std::string& name) {
  static const std::regex pattern(R"(layers\.\d+\.self_attn\.rotary_emb\.inv_freq)");
  return std::regex_match(name, pattern);
}

Llama& as_mixtral(const CausalLM& model) {
  const auto* m = dynamic_cast<const Llama*>(&model);
  TESSEL_CHECK(m != nullptr && m->config().is_moe(), "Mixtral family: model '", model.type_name(),
               "' is not a Mixtral");
  return const_cast<Llama&>(*m);
}

std::string with_shape(const std::string& name, const Shape& shape) {
  std::ostringstream s;
  s << name << " " << shape;
  return s.str();
}

class MixtralFamily final : public Family {
 public:
  std::string_view name() const override { return "mixtral"; }
  std::vector<std::string> architectures() const override { return {"MixtralForCausalLM"}; }
  std::vector<std::string> model_types() const override { return {"mixtral"}; }
  ConfigPtr parse_config(const std::string& json_text, const std::string& what) const override {
    LlamaConfig c = LlamaConfig::from_json(json_text, what);
    TESSEL_CHECK(c.is_moe(), what, ": describes a ", llama_architecture(c.variant),
                 ", not a MixtralForCausalLM");
    return std::make_shared<LlamaConfig>(c);
  }
  std::vector<std::string> preset_names() const override { return mixtral_preset_names(); }
  ConfigPtr preset(const std::string& name) const override {
    return std::make_shared<LlamaConfig>(mixtral_preset(name));
  }
  io::NamedTensors to_hf(const CausalLM& model) const override {
    return mixtral_to_hf(as_mixtral(model));
  }
  HfLayout hf_layout(const CausalLM& model,
                     const io::SafetensorsCheckpoint& checkpoint) const override {
    return mixtral_hf_layout(as_mixtral(model), checkpoint);
  }
  std::string hf_name(const std::string& name) const override { return mixtral_hf_name(name); }
  bool hf_transposed(const std::string&) const override { return false; }
  std::vector<std::string> tokenizer_files() const override {
    return {"tokenizer.json", "tokenizer.model"};
  }
  // llama.cpp stores Mixtral under "llama" with llama.expert_count (llama_gguf.cpp): a GGUF file
  // is found through the LLaMA family, whose config reader gives a Mixtral config when it has
  // experts.
  std::string_view gguf_architecture() const override { return "llama"; }
  ConfigPtr config_from_gguf(const io::GgufFile& file) const override {
    return llama_config_from_gguf(file);
  }
  void config_to_gguf(const ModelConfig& config, io::GgufMetadata& out) const override {
    llama_config_to_gguf(config, out);
  }
  io::NamedTensors to_gguf(const CausalLM& model) const override {
    return llama_to_gguf(as_mixtral(model));
  }
  void load_gguf(CausalLM& model, const io::GgufFile& file) const override {
    llama_load_gguf(as_mixtral(model), file);
  }
  // LLaMA's names plus the stacks: what a rank's loader reads its part through (--ep, --pp).
  GgufLayout gguf_layout(const CausalLM& model, const io::GgufFile& file) const override {
    return llama_gguf_layout(as_mixtral(model), file);
  }
};

}  // namespace

const Family& mixtral_family() {
  static const MixtralFamily family;
  return family;
}

std::string mixtral_hf_name(const std::string& name) {
  std::string base, proj;
  if (match_experts(name, base, proj)) return kPrefix + base + "." + proj;
  static const std::string router = ".block_sparse_moe.router.weight";
  if (name.size() > router.size() &&
      name.compare(name.size() - router.size(), router.size(), router) == 0)
    return kPrefix + name.substr(0, name.size() - router.size()) + ".block_sparse_moe.gate.weight";
  return llama_hf_name(name);
}

io::NamedTensors mixtral_to_hf(const Llama& model) {
  io::NamedTensors out;
  for (auto& [name, t] : model.state_dict()) {
    std::string base, proj;
    if (!match_experts(name, base, proj)) {
      out.emplace_back(mixtral_hf_name(name), t);
      continue;
    }
    for (int64_t e = 0; e < t.size(0); ++e)
      out.emplace_back(kPrefix + base + "." + std::to_string(e) + "." + proj + ".weight",
                       t.narrow(0, e, 1).reshape({t.size(1), t.size(2)}));
  }
  return out;
}

HfLayout mixtral_hf_layout(const Llama& model, const io::SafetensorsCheckpoint& checkpoint) {
  const std::string context = "load MixtralForCausalLM checkpoint";
  std::map<std::string, std::string> stored;  // name without the prefix -> stored name
  HfLayout layout;
  for (const std::string& raw : checkpoint.names()) {
    const std::string name = strip_prefix(raw);
    if (is_inv_freq_buffer(name)) continue;
    if (raw == "lm_head.weight" && !model.lm_head) {
      const Shape& embedding = model.embed_tokens->weight.shape();
      TESSEL_CHECK(checkpoint.entry(raw).shape == embedding, context, ": ", raw, " has shape ",
                   checkpoint.entry(raw).shape, ", expected model.embed_tokens.weight's ",
                   embedding, " (tie_word_embeddings is true)");
      layout.equal.emplace(raw, "embed_tokens.weight");
      continue;
    }
    TESSEL_CHECK(stored.emplace(name, raw).second, context, ": tensor '", name,
                 "' is stored both with and without the '", kPrefix, "' prefix");
  }
  std::set<std::string> used;
  std::vector<std::string> missing, unexpected, mismatched;
  // The stored name of `hf` when it is there with `shape`; empty (and the problem noted) if not.
  const auto find = [&](const std::string& hf, const Shape& shape) -> std::string {
    const auto it = stored.find(strip_prefix(hf));
    if (it == stored.end()) {
      missing.push_back(with_shape(hf, shape));
      return "";
    }
    used.insert(it->first);
    const io::SafetensorsEntry& e = checkpoint.entry(it->second);
    if (e.shape != shape) {
      std::ostringstream s;
      s << it->second << " (expected " << shape << ", got " << e.shape << ")";
      mismatched.push_back(s.str());
      return "";
    }
    return it->second;
  };
  for (auto& [name, t] : model.state_dict()) {
    std::string base, proj;
    const std::string hf = mixtral_hf_name(name);
    if (!match_experts(name, base, proj) || stored.count(strip_prefix(hf))) {
      // A plain tensor, or a stack as the trainer's streamed checkpoint writes it.
      const std::string raw = find(hf, t.shape());
      if (!raw.empty()) layout.tensors.emplace(name, HfStored{raw, false, {}});
      continue;
    }
    HfStored parts;
    bool complete = true;
    for (int64_t e = 0; e < t.size(0); ++e) {
      const std::string raw =
          find(kPrefix + base + "." + std::to_string(e) + "." + proj + ".weight",
               Shape{t.size(1), t.size(2)});
      complete = complete && !raw.empty();
      parts.stacked.push_back(raw);
    }
    if (complete) layout.tensors.emplace(name, std::move(parts));
  }
  for (auto& [name, raw] : stored)
    if (!used.count(name)) unexpected.push_back(with_shape(raw, checkpoint.entry(raw).shape));
  nn::check_state_names(context, missing, unexpected, mismatched);
  return layout;
}

LlamaConfig mixtral_preset(const std::string& name) {
  LlamaConfig c;
  c.variant = LlamaVariant::Mixtral;
  c.sliding_window = 0;
  if (name == "tiny") {
    // GPT-2 tiny's width, depth, vocabulary and tokenizer; 4 experts of 256, top-2.
    c.vocab_size = 50257;
    c.hidden = 192;
    c.intermediate_size = 256;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 256;
    c.rms_norm_eps = 1e-5;
    c.tie_word_embeddings = true;
    c.bos_token_id = 50256;
    c.eos_token_ids = {50256};
    c.num_local_experts = 4;
    c.num_experts_per_tok = 2;
    c.router_aux_loss_coef = 0.01;
  } else if (name == "mixtral-8x7b") {  // mistralai/Mixtral-8x7B-v0.1
    c.vocab_size = 32000;
    c.hidden = 4096;
    c.intermediate_size = 14336;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 32768;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 1e6;
    c.tie_word_embeddings = false;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    c.num_local_experts = 8;
    c.num_experts_per_tok = 2;
    c.router_aux_loss_coef = 0.02;
  } else {
    std::string names;
    for (const std::string& n : mixtral_preset_names()) names += (names.empty() ? "" : ", ") + n;
    TESSEL_FAIL("Mixtral preset '", name, "' is unknown (presets: ", names, ")");
  }
  c.head_dim = c.hidden / c.num_attention_heads;
  c.validate();
  return c;
}

const std::vector<std::string>& mixtral_preset_names() {
  static const std::vector<std::string> names = {"tiny", "mixtral-8x7b"};
  return names;
}

}  // namespace tessel::models
