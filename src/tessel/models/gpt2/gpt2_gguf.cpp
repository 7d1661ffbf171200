// SPDX-License-Identifier: Apache-2.0
// GPT-2 in GGUF: the gpt2.* keys <-> GPT2Config, and tessel's parameter names <-> GGUF's
// (token_embd, position_embd, blk.N.attn_qkv, ...). GGUF keeps Linear's [out, in] layout, which
// is tessel's own: the Conv1D transpose happens between GGUF and Hugging Face's safetensors, so a
// tessel parameter is stored as it is. The tied head is written as output.weight too (readers
// expect it); on load it is accepted when it holds the embedding's bytes, and makes the head
// untied when it differs.
#include <map>
#include <regex>

#include "tessel/core/error.h"
#include "tessel/models/gguf_layout.h"
#include "tessel/models/gguf_model.h"
#include "tessel/models/gpt2/gpt2.h"

namespace tessel::models {

namespace {

constexpr const char* kArch = "gpt2";

const GPT2& as_gpt2(const CausalLM& model) {
  const auto* m = dynamic_cast<const GPT2*>(&model);
  TESSEL_CHECK(m != nullptr, "GPT-2 GGUF: model '", model.type_name(), "' is not a GPT-2");
  return *m;
}

std::string key(const char* suffix) {
  return std::string(kArch) + "." + suffix;
}

}  // namespace

std::string gpt2_gguf_name(const std::string& name) {
  static const std::map<std::string, std::string> kTop = {{"wte.weight", "token_embd.weight"},
                                                          {"wpe.weight", "position_embd.weight"},
                                                          {"ln_f.weight", "output_norm.weight"},
                                                          {"ln_f.bias", "output_norm.bias"},
                                                          {"lm_head.weight", "output.weight"}};
  static const std::map<std::string, std::string> kBlock = {
      {"ln_1", "attn_norm"}, {"attn.c_attn", "attn_qkv"}, {"attn.c_proj", "attn_output"},
      {"ln_2", "ffn_norm"},  {"mlp.c_fc", "ffn_up"},      {"mlp.c_proj", "ffn_down"}};
  if (auto it = kTop.find(name); it != kTop.end()) return it->second;
  static const std::regex pattern(R"(h\.(\d+)\.(.+)\.(weight|bias))");
  std::smatch m;
  if (std::regex_match(name, m, pattern)) {
    if (auto it = kBlock.find(m[2].str()); it != kBlock.end())
      return "blk." + m[1].str() + "." + it->second + "." + m[3].str();
  }
  TESSEL_FAIL("GPT-2 GGUF: no GGUF name for parameter '", name, "'");
}

ConfigPtr gpt2_config_from_gguf(const io::GgufFile& file) {
  auto c = std::make_shared<GPT2Config>();
  c->n_positions = gguf_int(file, key("context_length"));
  c->n_embd = gguf_int(file, key("embedding_length"));
  c->n_layer = gguf_int(file, key("block_count"));
  c->n_head = gguf_int(file, key("attention.head_count"));
  const int64_t inner = gguf_optional_int(file, key("feed_forward_length")).value_or(4 * c->n_embd);
  c->n_inner = inner == 4 * c->n_embd ? 0 : inner;
  c->layer_norm_epsilon = gguf_float(file, key("attention.layer_norm_epsilon"), 1e-5);
  TESSEL_CHECK(file.contains("token_embd.weight"), file.path(),
               ": tensor token_embd.weight is missing");
  c->vocab_size = file.info("token_embd.weight").shape()[0];
  if (auto v = gguf_optional_int(file, key("vocab_size"))) c->vocab_size = *v;
  // The file is for inference: no dropout.
  c->resid_pdrop = c->embd_pdrop = c->attn_pdrop = 0.0;
  c->tie_word_embeddings = !file.contains("output.weight") ||
                           gguf_same_bytes(file, "output.weight", "token_embd.weight");
  if (auto id = gguf_token_id(file, "bos")) c->bos_token_id = *id;
  if (auto id = gguf_token_id(file, "eos")) c->eos_token_id = *id;
  return c;
}

void gpt2_config_to_gguf(const ModelConfig& config, io::GgufMetadata& out) {
  const auto* c = dynamic_cast<const GPT2Config*>(&config);
  TESSEL_CHECK(c != nullptr, "GPT-2 GGUF: the config is not a GPT-2's");
  // The hyper-parameters are u32, as llama.cpp writes them and requires them (it refuses a u64
  // context_length).
  auto u32 = [](int64_t v) {
    TESSEL_CHECK(v >= 0 && v <= int64_t(UINT32_MAX), "GGUF export: ", v, " does not fit in u32");
    return io::GgufValue::of(io::GgufType::U32, uint64_t(v));
  };
  out.set(key("context_length"), u32(c->n_positions));
  out.set(key("embedding_length"), u32(c->n_embd));
  out.set(key("block_count"), u32(c->n_layer));
  out.set(key("feed_forward_length"), u32(c->inner()));
  out.set(key("attention.head_count"), u32(c->n_head));
  out.set(key("attention.layer_norm_epsilon"),
          io::GgufValue::of_float(io::GgufType::F32, c->layer_norm_epsilon));
}

io::NamedTensors gpt2_to_gguf(const CausalLM& model) {
  const GPT2& gpt2 = as_gpt2(model);
  io::NamedTensors out;
  for (auto& [name, t] : gpt2.state_dict()) out.emplace_back(gpt2_gguf_name(name), t);
  if (gpt2.config().tie_word_embeddings) out.emplace_back("output.weight", gpt2.wte->weight);
  return out;
}

void gpt2_load_gguf(CausalLM& model, const io::GgufFile& file) {
  const GPT2& gpt2 = as_gpt2(model);
  std::set<std::string> skip;
  if (gpt2.config().tie_word_embeddings) skip.insert("output.weight");
  load_gguf_tensors(model, file, "load GPT-2 GGUF", gpt2_gguf_name, nullptr, skip);
}

GgufLayout gpt2_gguf_layout(const CausalLM& model, const io::GgufFile& file) {
  const GPT2& gpt2 = as_gpt2(model);
  std::set<std::string> skip;
  if (gpt2.config().tie_word_embeddings) skip.insert("output.weight");
  return make_gguf_layout(model, file, "load GPT-2 GGUF", gpt2_gguf_name, nullptr, skip);
}

}  // namespace tessel::models
