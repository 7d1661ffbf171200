// SPDX-License-Identifier: Apache-2.0
// The LLaMA family: registry facts, presets, and the Hugging Face checkpoint mapping.
#include "tessel/models/llama/llama_family.h"

#include <cstring>
#include <map>
#include <regex>
#include <sstream>

#include "tessel/core/error.h"
#include "tessel/models/llama/llama_gguf.h"

namespace tessel::models {

namespace {

constexpr const char* kPrefix = "model.";

// Buffers older checkpoints saved beside the weights; not parameters.
bool is_inv_freq_buffer(const std::string& name) {
  static const std::regex pattern(R"(layers\.\d+\.self_attn\.rotary_emb\.inv_freq)");
  return std::regex_match(name, pattern);
}

Llama& as_llama(const CausalLM& model) {
  const auto* m = dynamic_cast<const Llama*>(&model);
  TESSEL_CHECK(m != nullptr, "LLaMA family: model '", model.type_name(), "' is not a LLaMA");
  return const_cast<Llama&>(*m);
}

class LlamaFamily final : public Family {
 public:
  std::string_view name() const override { return "llama"; }
  std::vector<std::string> architectures() const override {
    return {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"};
  }
  std::vector<std::string> model_types() const override { return {"llama", "mistral", "qwen2"}; }
  ConfigPtr parse_config(const std::string& json_text, const std::string& what) const override {
    return std::make_shared<LlamaConfig>(LlamaConfig::from_json(json_text, what));
  }
  std::vector<std::string> preset_names() const override { return LlamaConfig::preset_names(); }
  ConfigPtr preset(const std::string& name) const override {
    return std::make_shared<LlamaConfig>(LlamaConfig::preset(name));
  }
  io::NamedTensors to_hf(const CausalLM& model) const override {
    return llama_to_hf(as_llama(model));
  }
  HfLayout hf_layout(const CausalLM& model,
                     const io::SafetensorsCheckpoint& checkpoint) const override {
    return llama_hf_layout(as_llama(model), checkpoint);
  }
  std::string hf_name(const std::string& name) const override { return llama_hf_name(name); }
  bool hf_transposed(const std::string&) const override { return false; }
  std::vector<std::string> tokenizer_files() const override {
    return {"tokenizer.json", "tokenizer.model"};
  }
  std::string_view gguf_architecture() const override { return "llama"; }
  ConfigPtr config_from_gguf(const io::GgufFile& file) const override {
    return llama_config_from_gguf(file);
  }
  void config_to_gguf(const ModelConfig& config, io::GgufMetadata& out) const override {
    llama_config_to_gguf(config, out);
  }
  io::NamedTensors to_gguf(const CausalLM& model) const override { return llama_to_gguf(model); }
  void load_gguf(CausalLM& model, const io::GgufFile& file) const override {
    llama_load_gguf(model, file);
  }
  GgufLayout gguf_layout(const CausalLM& model, const io::GgufFile& file) const override {
    return llama_gguf_layout(model, file);
  }
};

}  // namespace

const Family& llama_family() {
  static const LlamaFamily family;
  return family;
}

const Family& mixtral_family();  // mixtral/mixtral_family.cpp

const Family& LlamaConfig::family() const {
  return is_moe() ? mixtral_family() : llama_family();
}

std::string llama_hf_name(const std::string& name) {
  return name == "lm_head.weight" ? name : kPrefix + name;
}

io::NamedTensors llama_to_hf(const Llama& model) {
  io::NamedTensors out;
  for (auto& [name, t] : model.state_dict()) out.emplace_back(llama_hf_name(name), t);
  return out;
}

HfLayout llama_hf_layout(const Llama& model, const io::SafetensorsCheckpoint& checkpoint) {
  const std::string context =
      "load " + std::string(llama_architecture(model.config().variant)) + " checkpoint";
  // tessel name -> stored name.
  std::map<std::string, std::string> stored;
  HfLayout layout;
  for (const std::string& raw : checkpoint.names()) {
    std::string name = raw.rfind(kPrefix, 0) == 0 ? raw.substr(std::strlen(kPrefix)) : raw;
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
  std::map<std::string, bool> wanted;
  std::vector<std::string> missing, unexpected, mismatched;
  for (auto& [name, t] : model.state_dict()) {
    wanted[name] = true;
    auto it = stored.find(name);
    if (it == stored.end()) {
      missing.push_back(llama_hf_name(name) + " " + t.shape().str());
      continue;
    }
    const io::SafetensorsEntry& e = checkpoint.entry(it->second);
    if (e.shape != t.shape()) {
      std::ostringstream s;
      s << it->second << " (expected " << t.shape() << ", got " << e.shape << ")";
      mismatched.push_back(s.str());
      continue;
    }
    layout.tensors.emplace(name, HfStored{it->second, false});
  }
  for (auto& [name, raw] : stored) {
    if (!wanted.count(name)) {
      std::ostringstream s;
      s << raw << " " << checkpoint.entry(raw).shape;
      unexpected.push_back(s.str());
    }
  }
  nn::check_state_names(context, missing, unexpected, mismatched);
  return layout;
}

}  // namespace tessel::models
