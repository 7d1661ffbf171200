// SPDX-License-Identifier: Apache-2.0
// Mapping between tessel's GPT-2 parameters and the Hugging Face checkpoint layout.
#include "tessel/models/gpt2/gpt2_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "tessel/io/mapped_file.h"
#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"

namespace tessel::models {

namespace {

constexpr const char* kPrefix = "transformer.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The causal-mask buffers older HF versions saved; not parameters.
bool is_mask_buffer(const std::string& name) {
  static const std::regex pattern(R"(h\.\d+\.attn\.(bias|masked_bias))");
  return std::regex_match(name, pattern);
}

Shape transposed(const Shape& s) {
  return Shape{s[1], s[0]};
}

}  // namespace

bool gpt2_is_conv1d_weight(const std::string& name) {
  for (const char* s :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    if (ends_with(name, s)) return true;
  }
  return false;
}

io::NamedTensors gpt2_to_hf(const GPT2& model, const std::string& prefix) {
  io::NamedTensors out;
  for (auto& [name, t] : model.state_dict()) {
    if (name == "lm_head.weight") {
      out.emplace_back(name, t);  // HF keeps the head outside `transformer.`
    } else if (gpt2_is_conv1d_weight(name)) {
      out.emplace_back(prefix + name, t.transpose(0, 1));
    } else {
      out.emplace_back(prefix + name, t);
    }
  }
  return out;
}

HfLayout gpt2_hf_layout(const GPT2& model, const io::SafetensorsCheckpoint& checkpoint) {
  // HF name (no prefix) -> stored name.
  std::map<std::string, std::string> stored;
  std::vector<std::string> unexpected, mismatched, missing;
  HfLayout layout;
  for (const std::string& raw : checkpoint.names()) {
    std::string name = raw.rfind(kPrefix, 0) == 0 ? raw.substr(std::strlen(kPrefix)) : raw;
    if (is_mask_buffer(name)) continue;
    if (name == "lm_head.weight" && model.config().tie_word_embeddings) {
      const Shape& wte = model.wte->weight.shape();
      TESSEL_CHECK(checkpoint.entry(raw).shape == wte, "load GPT-2: ", raw, " has shape ",
                   checkpoint.entry(raw).shape, ", expected wte's ", wte);
      layout.equal.emplace(raw, "wte.weight");
      continue;
    }
    TESSEL_CHECK(stored.emplace(name, raw).second, "load GPT-2: tensor '", name,
                 "' is stored both with and without the '", kPrefix, "' prefix");
  }
  std::map<std::string, bool> wanted;
  for (auto& [name, t] : model.state_dict()) {
    wanted[name] = true;
    const bool conv = gpt2_is_conv1d_weight(name);
    const Shape hf_shape = conv ? transposed(t.shape()) : t.shape();
    auto it = stored.find(name);
    if (it == stored.end()) {
      missing.push_back(name);
      continue;
    }
    const io::SafetensorsEntry& e = checkpoint.entry(it->second);
    if (e.shape != hf_shape) {
      std::ostringstream s;
      s << it->second << " (expected " << hf_shape << ", got " << e.shape << ")";
      mismatched.push_back(s.str());
      continue;
    }
    layout.tensors.emplace(name, HfStored{it->second, conv});
  }
  for (auto& [name, raw] : stored) {
    if (!wanted.count(name)) unexpected.push_back(raw);
  }
  nn::check_state_names("load GPT-2 checkpoint", missing, unexpected, mismatched);
  return layout;
}

std::shared_ptr<GPT2> load_gpt2(const std::string& dir) {
  auto model = std::dynamic_pointer_cast<GPT2>(load_model(dir));
  TESSEL_CHECK(model != nullptr, "load GPT-2: ", dir, "/config.json describes another family");
  return model;
}

void save_gpt2(const GPT2& model, const std::string& dir, const GPT2SaveOptions& options) {
  TESSEL_CHECK(options.prefix.empty() || options.prefix == kPrefix, "save GPT-2: prefix '",
               options.prefix, "' must be empty or '", kPrefix, "'");
  save_model_tensors(model, gpt2_to_hf(model, options.prefix), dir, {options.max_shard_bytes});
}

}  // namespace tessel::models
