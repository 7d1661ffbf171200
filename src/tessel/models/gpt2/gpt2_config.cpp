// SPDX-License-Identifier: Apache-2.0
// GPT2Config parsing: Hugging Face keys and aliases, type and range checks, presets.
#include "tessel/models/gpt2/gpt2_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessel/models/config_json.h"

namespace tessel::models {

namespace {

using Json = nlohmann::json;

// Reads an integer key under its name or its alias; both present and different is an error.
bool read_int(const Json& j, const char* key, const char* alias, int64_t& out,
              const std::string& what) {
  const Json* found = nullptr;
  std::string found_key;
  for (const char* k : {key, alias}) {
    if (k == nullptr || !j.contains(k)) continue;
    const Json& v = j.at(k);
    TESSEL_CHECK(v.is_number_integer(), what, ": '", k, "' must be an integer, got ", v.dump());
    if (found != nullptr) {
      TESSEL_CHECK(*found == v, what, ": '", found_key, "' = ", found->dump(), " and its alias '",
                   k, "' = ", v.dump(), " disagree");
    }
    found = &v;
    found_key = k;
  }
  if (found == nullptr) return false;
  out = found->get<int64_t>();
  return true;
}

void read_double(const Json& j, const char* key, double& out, const std::string& what) {
  if (!j.contains(key)) return;
  const Json& v = j.at(key);
  TESSEL_CHECK(v.is_number(), what, ": '", key, "' must be a number, got ", v.dump());
  out = v.get<double>();
}

void read_bool(const Json& j, const char* key, bool& out, const std::string& what) {
  if (!j.contains(key)) return;
  const Json& v = j.at(key);
  TESSEL_CHECK(v.is_boolean(), what, ": '", key, "' must be true or false, got ", v.dump());
  out = v.get<bool>();
}

}  // namespace

GPT2Config GPT2Config::from_json(const std::string& text, const std::string& what) {
  const Json j = parse_config_object(text, what);
  bool moe = false;
  if (j.contains("model_type")) {
    TESSEL_CHECK(j["model_type"] == "gpt2" || j["model_type"] == "gpt2_moe", what, ": model_type ",
                 j["model_type"].dump(), " is not \"gpt2\" or \"gpt2_moe\"");
    moe = j["model_type"] == "gpt2_moe";
  } else if (auto it = j.find("architectures"); it != j.end() && it->is_array()) {
    for (const Json& a : *it) moe = moe || a == "GPT2MoELMHeadModel";
  }
  GPT2Config c;
  if (moe) {
    c.moe = GPT2MoESettings::from_json(j, what);
    TESSEL_CHECK(c.moe.enabled(), what,
                 ": a gpt2_moe config needs 'num_experts' (with 'moe_every') or 'expert_counts'");
  }
  read_int(j, "vocab_size", nullptr, c.vocab_size, what);
  read_int(j, "n_positions", "max_position_embeddings", c.n_positions, what);
  read_int(j, "n_embd", "hidden_size", c.n_embd, what);
  read_int(j, "n_layer", "num_hidden_layers", c.n_layer, what);
  read_int(j, "n_head", "num_attention_heads", c.n_head, what);
  if (j.contains("n_inner") && !j["n_inner"].is_null()) {
    read_int(j, "n_inner", nullptr, c.n_inner, what);
    TESSEL_CHECK(c.n_inner > 0, what, ": 'n_inner' ", c.n_inner, " must be positive or null");
  }
  if (j.contains("activation_function")) {
    const Json& a = j["activation_function"];
    TESSEL_CHECK(a.is_string(), what, ": 'activation_function' must be a string, got ", a.dump());
    TESSEL_CHECK(a == "gelu_new", what, ": activation_function ", a.dump(),
                 " is not supported (GPT-2 uses \"gelu_new\", the tanh GELU)");
  }
  read_double(j, "layer_norm_epsilon", c.layer_norm_epsilon, what);
  read_double(j, "resid_pdrop", c.resid_pdrop, what);
  read_double(j, "embd_pdrop", c.embd_pdrop, what);
  read_double(j, "attn_pdrop", c.attn_pdrop, what);
  read_double(j, "initializer_range", c.initializer_range, what);
  read_bool(j, "tie_word_embeddings", c.tie_word_embeddings, what);
  if (j.contains("bos_token_id") && !j["bos_token_id"].is_null())
    read_int(j, "bos_token_id", nullptr, c.bos_token_id, what);
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null())
    read_int(j, "eos_token_id", nullptr, c.eos_token_id, what);
  bool scale = true, by_layer = false, reorder = false;
  read_bool(j, "scale_attn_weights", scale, what);
  read_bool(j, "scale_attn_by_inverse_layer_idx", by_layer, what);
  read_bool(j, "reorder_and_upcast_attn", reorder, what);
  TESSEL_CHECK(scale, what, ": scale_attn_weights = false is not supported (expected true)");
  TESSEL_CHECK(!by_layer, what,
               ": scale_attn_by_inverse_layer_idx = true is not supported (expected false)");
  TESSEL_CHECK(!reorder, what,
               ": reorder_and_upcast_attn = true is not supported (expected false)");
  try {
    c.validate();
  } catch (const Error& e) {
    TESSEL_FAIL(what, ": ", e.what());
  }
  return c;
}

GPT2Config GPT2Config::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "GPT2Config: cannot open ", path);
  std::ostringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path);
}

GPT2Config GPT2Config::preset(const std::string& name) {
  GPT2Config c;
  auto set = [&](int64_t layers, int64_t heads, int64_t embd) {
    c.n_layer = layers;
    c.n_head = heads;
    c.n_embd = embd;
    return c;
  };
  if (name == "tiny") {
    c.n_positions = 256;
    c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
    return set(4, 6, 192);
  }
  if (name == "124M" || name == "small") return set(12, 12, 768);
  if (name == "355M" || name == "350M" || name == "medium") return set(24, 16, 1024);
  if (name == "774M" || name == "large") return set(36, 20, 1280);
  if (name == "1558M" || name == "1.5B" || name == "xl") return set(48, 25, 1600);
  TESSEL_FAIL("GPT2Config::preset: unknown preset '", name, "' (expected tiny, small, 124M, ",
              "medium, 355M, large, 774M, xl, 1558M)");
}

const std::vector<std::string>& GPT2Config::preset_names() {
  static const std::vector<std::string> names = {"tiny",  "small", "124M", "medium", "355M",
                                                 "large", "774M",  "xl",   "1558M"};
  return names;
}

std::string GPT2Config::to_json() const {
  Json j;
  j["architectures"] = {moe.enabled() ? "GPT2MoELMHeadModel" : "GPT2LMHeadModel"};
  j["model_type"] = moe.enabled() ? "gpt2_moe" : "gpt2";
  if (moe.enabled()) moe.to_json(j);
  j["vocab_size"] = vocab_size;
  j["n_positions"] = n_positions;
  j["n_ctx"] = n_positions;
  j["n_embd"] = n_embd;
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  j["n_inner"] = n_inner > 0 ? Json(n_inner) : Json(nullptr);
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = layer_norm_epsilon;
  j["resid_pdrop"] = resid_pdrop;
  j["embd_pdrop"] = embd_pdrop;
  j["attn_pdrop"] = attn_pdrop;
  j["initializer_range"] = initializer_range;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["bos_token_id"] = bos_token_id;
  j["eos_token_id"] = eos_token_id;
  j["scale_attn_weights"] = true;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  return j.dump(2) + "\n";
}

void GPT2Config::validate() const {
  TESSEL_CHECK(vocab_size > 0, "GPT2Config: vocab_size ", vocab_size, " must be positive");
  TESSEL_CHECK(n_positions > 0, "GPT2Config: n_positions ", n_positions, " must be positive");
  TESSEL_CHECK(n_layer > 0, "GPT2Config: n_layer ", n_layer, " must be positive");
  TESSEL_CHECK(n_embd > 0 && n_head > 0 && n_embd % n_head == 0, "GPT2Config: n_embd ", n_embd,
               " must be a positive multiple of n_head ", n_head);
  TESSEL_CHECK(n_inner >= 0, "GPT2Config: n_inner ", n_inner,
               " must be positive (or 0 = 4 * n_embd)");
  TESSEL_CHECK(layer_norm_epsilon > 0, "GPT2Config: layer_norm_epsilon ", layer_norm_epsilon,
               " must be positive");
  for (auto [name, p] : {std::pair{"resid_pdrop", resid_pdrop}, std::pair{"embd_pdrop", embd_pdrop},
                         std::pair{"attn_pdrop", attn_pdrop}}) {
    TESSEL_CHECK(p >= 0 && p < 1, "GPT2Config: ", name, " ", p, " must be in [0, 1)");
  }
  TESSEL_CHECK(initializer_range >= 0, "GPT2Config: initializer_range ", initializer_range,
               " must be >= 0");
  if (moe.enabled()) moe.validate(n_layer);
}

int64_t GPT2Config::ffn_parameter_count(int64_t layer) const {
  const int64_t c = n_embd, i = inner(), mlp = (c * i + i) + (i * c + c);
  const int64_t e = moe.enabled() ? moe.experts_in(layer) : 0;
  if (e == 0) return mlp;
  return e * mlp + e * c + (moe.residual ? mlp : 0);  // experts, router, PR-MoE's dense MLP
}

int64_t GPT2Config::ffn_active_parameter_count(int64_t layer) const {
  const int64_t c = n_embd, i = inner(), mlp = (c * i + i) + (i * c + c);
  const int64_t e = moe.enabled() ? moe.experts_in(layer) : 0;
  if (e == 0) return mlp;
  return moe.top_k * mlp + e * c + (moe.residual ? mlp : 0);
}

int64_t GPT2Config::parameter_count() const {
  const int64_t c = n_embd;
  const int64_t attn_block = 2 * 2 * c + (c * 3 * c + 3 * c) + (c * c + c);
  int64_t n = vocab_size * c + n_positions * c + n_layer * attn_block + 2 * c;
  for (int64_t l = 0; l < n_layer; ++l) n += ffn_parameter_count(l);
  if (!tie_word_embeddings) n += vocab_size * c;
  return n;
}

models::GPT2BlockConfig GPT2Config::block_config(int64_t layer) const {
  models::GPT2BlockConfig b;
  b.n_embd = n_embd;
  b.n_head = n_head;
  b.n_inner = n_inner;
  b.layer_norm_epsilon = layer_norm_epsilon;
  b.resid_pdrop = resid_pdrop;
  b.n_layer = n_layer;
  if (moe.enabled() && moe.experts_in(layer) > 0) b.moe = moe.layer_config(layer, n_embd, inner());
  return b;
}

std::string GPT2Config::summary() const {
  std::string s = std::string(moe.enabled() ? "GPT-2-MoE " : "GPT-2 ") + std::to_string(n_layer) +
                  " layers x " + std::to_string(n_embd) + " wide, " + std::to_string(n_head) +
                  " heads";
  if (moe.enabled()) {
    s += ", experts per block [";
    for (int64_t l = 0; l < n_layer; ++l) s += (l ? "," : "") + std::to_string(moe.experts_in(l));
    s += "] top-" + std::to_string(moe.top_k) + (moe.residual ? " residual" : "");
  }
  return s;
}

bool GPT2Config::same_shapes(const ModelConfig& other) const {
  const auto* o = dynamic_cast<const GPT2Config*>(&other);
  return o != nullptr && o->vocab_size == vocab_size && o->n_positions == n_positions &&
         o->n_embd == n_embd && o->n_layer == n_layer && o->n_head == n_head &&
         o->inner() == inner() && o->tie_word_embeddings == tie_word_embeddings && same_experts(*o);
}

bool GPT2Config::same_experts(const GPT2Config& o) const {
  if (o.moe.enabled() != moe.enabled() || o.moe.residual != moe.residual) return false;
  for (int64_t l = 0; l < n_layer; ++l)
    if (o.moe.experts_in(l) != moe.experts_in(l)) return false;
  return true;
}

double GPT2Config::flops_per_token(int64_t seq_len) const {
  double inactive = 0;  // experts a token does not run
  for (int64_t l = 0; l < n_layer; ++l)
    inactive += double(ffn_parameter_count(l) - ffn_active_parameter_count(l));
  const double matmul_params = double(parameter_count() - n_positions * n_embd) - inactive;
  return 6.0 * matmul_params + 6.0 * double(n_layer) * double(n_embd) * double(seq_len);
}

double GPT2Config::recompute_flops_per_token(nn::Recompute mode, int64_t seq_len) const {
  TESSEL_CHECK(seq_len >= 1, "recompute_flops_per_token: seq_len ", seq_len, " must be >= 1");
  const GPT2BlockConfig b = block_config();
  const double c = double(b.n_embd), i = double(b.inner()), bias = b.bias ? 1.0 : 0.0;
  const double layers = double(n_layer);
  const double attention = 2.0 * c * double(seq_len);  // causal QK^T and PV, forward
  // Parameters per part; a LayerNorm counts as its parameters, as flops_per_token counts.
  const double ln = c * (1.0 + bias);
  const double qkv = 3.0 * c * c + 3.0 * c * bias;
  switch (mode) {
    case nn::Recompute::None:
      return 0.0;
    case nn::Recompute::Selective:
      return layers * (2.0 * (ln + qkv) + attention);
    case nn::Recompute::Full: {
      const double block =
          2.0 * ln + qkv + (c * c + c * bias) + (c * i + i * bias) + (i * c + c * bias);
      return layers * (2.0 * block + attention);
    }
  }
  TESSEL_FAIL("recompute_flops_per_token: unknown mode ", int(mode));
}

}  // namespace tessel::models
