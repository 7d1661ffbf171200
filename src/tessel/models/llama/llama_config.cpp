// SPDX-License-Identifier: Apache-2.0
// LlamaConfig: config.json parsing (keys, types, ranges, the variant's own keys), writing it back,
// and the range checks.
#include "tessel/models/llama/llama_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/models/config_json.h"

namespace tessel::models {

namespace {

using Json = nlohmann::json;

constexpr LlamaVariant kVariants[] = {LlamaVariant::Llama, LlamaVariant::Mistral,
                                      LlamaVariant::Qwen2, LlamaVariant::Mixtral};

// The keys of one config.json object, read with their types checked; every Error names the key.
class Reader {
 public:
  Reader(const Json& j, const std::string& what) : j_(j), what_(what) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const Json& at(const char* key) const { return j_.at(key); }

  int64_t integer(const char* key, std::optional<int64_t> fallback) const {
    if (!has(key)) {
      TESSEL_CHECK(fallback.has_value(), what_, ": required key '", key, "' is missing");
      return *fallback;
    }
    const Json& v = at(key);
    // 4096.0 is accepted as 4096 (some converters write integers as floats).
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
        std::abs(v.get<double>()) < 9e15)
      return int64_t(v.get<double>());
    TESSEL_CHECK(v.is_number_integer(), what_, ": '", key, "' must be an integer, got ", v.dump());
    return v.get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const Json& v = at(key);
    TESSEL_CHECK(v.is_number(), what_, ": '", key, "' must be a number, got ", v.dump());
    return v.get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const Json& v = at(key);
    TESSEL_CHECK(v.is_boolean(), what_, ": '", key, "' must be true or false, got ", v.dump());
    return v.get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const Json& v = at(key);
    TESSEL_CHECK(v.is_string(), what_, ": '", key, "' must be a string, got ", v.dump());
    return v.get<std::string>();
  }

 private:
  const Json& j_;
  const std::string& what_;
};

LlamaVariant variant_of(const Json& j, const std::string& what) {
  if (auto it = j.find("architectures"); it != j.end() && it->is_array()) {
    for (const Json& a : *it)
      for (LlamaVariant v : kVariants)
        if (a.is_string() && a.get<std::string>() == llama_architecture(v)) return v;
  }
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    for (LlamaVariant v : kVariants)
      if (it->get<std::string>() == llama_model_type(v)) return v;
    TESSEL_FAIL(what, ": model_type ", it->dump(),
                " is not one of \"llama\", \"mistral\", \"qwen2\", \"mixtral\"");
  }
  TESSEL_FAIL(what,
              ": names neither an architecture (LlamaForCausalLM, MistralForCausalLM, "
              "Qwen2ForCausalLM, MixtralForCausalLM) nor a model_type (llama, mistral, qwen2, "
              "mixtral)");
}

RopeScaling parse_rope_scaling(const Json& j, const std::string& what) {
  RopeScaling r;
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return r;
  const Json& s = j["rope_scaling"];
  TESSEL_CHECK(s.is_object(), what, ": 'rope_scaling' must be null or an object, got ", s.dump());
  const std::string where = what + ": rope_scaling";
  Reader read(s, where);
  const bool has_new = read.has("rope_type"), has_old = read.has("type");
  TESSEL_CHECK(has_new || has_old, where, ": neither 'rope_type' nor 'type' is given");
  const std::string kind = read.text(has_new ? "rope_type" : "type", "");
  if (has_new && has_old) {
    TESSEL_CHECK(read.text("type", "") == kind, where, ": 'rope_type' \"", kind, "\" and 'type' \"",
                 read.text("type", ""), "\" disagree");
  }
  r.legacy_key = !has_new;
  if (kind == "default") return r;
  if (kind == "linear") {
    r.type = RopeScaling::Type::Linear;
  } else if (kind == "dynamic") {
    r.type = RopeScaling::Type::Dynamic;
  } else if (kind == "llama3") {
    r.type = RopeScaling::Type::Llama3;
  } else {
    TESSEL_FAIL(where, ": rope type \"", kind,
                "\" is not supported (supported: linear, dynamic, llama3, or null / \"default\")");
  }
  TESSEL_CHECK(read.has("factor"), where, ": required key 'factor' is missing for rope type \"",
               kind, "\"");
  r.factor = read.number("factor", 1.0);
  if (r.type == RopeScaling::Type::Llama3) {
    for (const char* key :
         {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      TESSEL_CHECK(read.has(key), where, ": required key '", key,
                   "' is missing for rope type \"llama3\"");
    }
    r.low_freq_factor = read.number("low_freq_factor", 1.0);
    r.high_freq_factor = read.number("high_freq_factor", 4.0);
    r.original_max_position_embeddings = read.integer("original_max_position_embeddings", 0);
  }
  return r;
}

std::vector<int64_t> parse_eos(const Reader& read, const Json& j, const std::string& what,
                               bool& as_list) {
  as_list = false;
  if (!read.has("eos_token_id")) return {};
  const Json& v = j["eos_token_id"];
  if (!v.is_array()) return {read.integer("eos_token_id", 0)};
  as_list = true;
  std::vector<int64_t> ids;
  for (const Json& e : v) {
    TESSEL_CHECK(e.is_number_integer(), what, ": 'eos_token_id' entries must be integers, got ",
                 v.dump());
    ids.push_back(e.get<int64_t>());
  }
  return ids;
}

}  // namespace

std::string_view llama_architecture(LlamaVariant variant) {
  switch (variant) {
    case LlamaVariant::Llama:
      return "LlamaForCausalLM";
    case LlamaVariant::Mistral:
      return "MistralForCausalLM";
    case LlamaVariant::Qwen2:
      return "Qwen2ForCausalLM";
    case LlamaVariant::Mixtral:
      return "MixtralForCausalLM";
  }
  return "?";
}

std::string_view llama_model_type(LlamaVariant variant) {
  switch (variant) {
    case LlamaVariant::Llama:
      return "llama";
    case LlamaVariant::Mistral:
      return "mistral";
    case LlamaVariant::Qwen2:
      return "qwen2";
    case LlamaVariant::Mixtral:
      return "mixtral";
  }
  return "?";
}

std::string_view rope_type_name(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::Default:
      return "default";
    case RopeScaling::Type::Linear:
      return "linear";
    case RopeScaling::Type::Dynamic:
      return "dynamic";
    case RopeScaling::Type::Llama3:
      return "llama3";
  }
  return "?";
}

LlamaConfig LlamaConfig::from_json(const std::string& text, const std::string& what) {
  const Json j = parse_config_object(text, what);
  Reader read(j, what);
  LlamaConfig c;
  c.variant = variant_of(j, what);
  const bool llama = c.variant == LlamaVariant::Llama;
  const bool mistral = c.variant == LlamaVariant::Mistral;
  const bool qwen2 = c.variant == LlamaVariant::Qwen2;
  c.vocab_size = read.integer("vocab_size", std::nullopt);
  c.hidden = read.integer("hidden_size", std::nullopt);
  c.intermediate_size = read.integer("intermediate_size", std::nullopt);
  c.num_hidden_layers = read.integer("num_hidden_layers", std::nullopt);
  c.num_attention_heads = read.integer("num_attention_heads", std::nullopt);
  c.max_position_embeddings = read.integer("max_position_embeddings", std::nullopt);
  TESSEL_CHECK(c.num_attention_heads > 0, what, ": 'num_attention_heads' ", c.num_attention_heads,
               " must be positive");
  c.num_key_value_heads = read.integer("num_key_value_heads", c.num_attention_heads);
  if (read.has("head_dim")) {
    c.head_dim = read.integer("head_dim", 0);
  } else {
    TESSEL_CHECK(c.hidden % c.num_attention_heads == 0, what, ": 'hidden_size' ", c.hidden,
                 " is not divisible by 'num_attention_heads' ", c.num_attention_heads,
                 " (and no 'head_dim' is given)");
    c.head_dim = c.hidden / c.num_attention_heads;
  }
  c.rms_norm_eps = read.number("rms_norm_eps", 1e-6);
  c.rope_theta = read.number("rope_theta", 10000.0);
  c.rope_scaling = parse_rope_scaling(j, what);
  const double partial = read.number("partial_rotary_factor", 1.0);
  TESSEL_CHECK(partial == 1.0, what, ": 'partial_rotary_factor' ", partial,
               " is not supported (expected 1.0: the whole head is rotated)");
  c.tie_word_embeddings = read.boolean("tie_word_embeddings", false);
  // Mistral and Qwen2 have no such keys in transformers (their biases are fixed): ignored there.
  if (llama) {
    c.attention_bias = read.boolean("attention_bias", false);
    c.mlp_bias = read.boolean("mlp_bias", false);
  }
  // Mistral: absent is MistralConfig's default 4096, null is no window.
  if (mistral)
    c.sliding_window = j.contains("sliding_window") ? read.integer("sliding_window", 0) : 4096;
  if (c.variant == LlamaVariant::Mixtral) {
    // MixtralConfig's defaults: no window, 8 experts, top-2, coefficient 0.001.
    c.sliding_window = read.integer("sliding_window", 0);
    c.num_local_experts = read.integer("num_local_experts", 8);
    c.num_experts_per_tok = read.integer("num_experts_per_tok", 2);
    c.router_aux_loss_coef = read.number("router_aux_loss_coef", 0.001);
    c.output_router_logits = read.boolean("output_router_logits", false);
    const double jitter = read.number("router_jitter_noise", 0.0);
    TESSEL_CHECK(jitter == 0.0, what, ": 'router_jitter_noise' ", jitter,
                 " is not supported (Hugging Face's jitter scales the experts' input too; "
                 "expected 0)");
  }
  if (qwen2) {
    TESSEL_CHECK(!read.boolean("use_sliding_window", false), what,
                 ": 'use_sliding_window' = true is not supported for Qwen2 (its per-layer window "
                 "from max_window_layers on); expected false");
    if (read.has("sliding_window")) c.qwen2_sliding_window = read.integer("sliding_window", 0);
    c.max_window_layers = read.integer("max_window_layers", c.num_hidden_layers);
  }
  const std::string act = read.text("hidden_act", "silu");
  TESSEL_CHECK(act == "silu", what, ": 'hidden_act' \"", act,
               "\" is not supported (the LLaMA family uses \"silu\": SwiGLU)");
  const double attention_dropout = read.number("attention_dropout", 0.0);
  TESSEL_CHECK(attention_dropout == 0.0, what, ": 'attention_dropout' ", attention_dropout,
               " is not supported (the fused attention has no dropout; expected 0.0)");
  // Absent: transformers' defaults (Llama and Mistral 1 / 2, Qwen2 none); null: none.
  c.bos_token_id.reset();
  if (read.has("bos_token_id")) {
    c.bos_token_id = read.integer("bos_token_id", 0);
  } else if (!j.contains("bos_token_id") && !qwen2) {
    c.bos_token_id = 1;
  }
  c.eos_token_ids.clear();
  if (read.has("eos_token_id")) {
    c.eos_token_ids = parse_eos(read, j, what, c.eos_list);
  } else if (!j.contains("eos_token_id") && !qwen2) {
    c.eos_token_ids = {2};
  }
  c.initializer_range = read.number("initializer_range", 0.02);
  try {
    c.validate();
  } catch (const Error& e) {
    TESSEL_FAIL(what, ": ", e.what());
  }
  return c;
}

bool LlamaConfig::qkv_bias() const {
  return variant == LlamaVariant::Qwen2 || (variant == LlamaVariant::Llama && attention_bias);
}

bool LlamaConfig::o_bias() const {
  return variant == LlamaVariant::Llama && attention_bias;
}

bool LlamaConfig::mlp_biases() const {
  return variant == LlamaVariant::Llama && mlp_bias;
}

std::optional<int64_t> LlamaConfig::eos_id() const {
  if (eos_token_ids.empty()) return std::nullopt;
  return eos_token_ids.front();
}

std::string LlamaConfig::to_json() const {
  Json j;
  j["architectures"] = {std::string(llama_architecture(variant))};
  j["model_type"] = std::string(llama_model_type(variant));
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling.type == RopeScaling::Type::Default) {
    j["rope_scaling"] = nullptr;
  } else {
    Json s;
    s[rope_scaling.legacy_key ? "type" : "rope_type"] =
        std::string(rope_type_name(rope_scaling.type));
    s["factor"] = rope_scaling.factor;
    if (rope_scaling.type == RopeScaling::Type::Llama3) {
      s["low_freq_factor"] = rope_scaling.low_freq_factor;
      s["high_freq_factor"] = rope_scaling.high_freq_factor;
      s["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
    }
    j["rope_scaling"] = s;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_dropout"] = 0.0;
  if (variant == LlamaVariant::Llama) {
    j["attention_bias"] = attention_bias;
    j["mlp_bias"] = mlp_bias;
  }
  if (variant == LlamaVariant::Mistral)
    j["sliding_window"] = sliding_window > 0 ? Json(sliding_window) : Json(nullptr);
  if (variant == LlamaVariant::Mixtral) {
    j["sliding_window"] = sliding_window > 0 ? Json(sliding_window) : Json(nullptr);
    j["num_local_experts"] = num_local_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["router_aux_loss_coef"] = router_aux_loss_coef;
    j["output_router_logits"] = output_router_logits;
    j["router_jitter_noise"] = 0.0;
  }
  if (variant == LlamaVariant::Qwen2) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = qwen2_sliding_window ? Json(*qwen2_sliding_window) : Json(nullptr);
    j["max_window_layers"] = max_window_layers;
  }
  j["bos_token_id"] = bos_token_id ? Json(*bos_token_id) : Json(nullptr);
  if (eos_list) {
    j["eos_token_id"] = eos_token_ids;
  } else {
    j["eos_token_id"] = eos_token_ids.empty() ? Json(nullptr) : Json(eos_token_ids.front());
  }
  j["initializer_range"] = initializer_range;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

void LlamaConfig::validate() const {
  auto positive = [](const char* key, int64_t v) {
    TESSEL_CHECK(v > 0, "'", key, "' ", v, " must be positive");
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  TESSEL_CHECK(num_attention_heads % num_key_value_heads == 0, "'num_attention_heads' ",
               num_attention_heads, " is not a multiple of 'num_key_value_heads' ",
               num_key_value_heads, " (each KV head serves a whole group of query heads)");
  TESSEL_CHECK(head_dim % 2 == 0, "'head_dim' ", head_dim,
               " must be even (rotary embeddings rotate pairs of features)");
  TESSEL_CHECK(rms_norm_eps > 0 && std::isfinite(rms_norm_eps), "'rms_norm_eps' ", rms_norm_eps,
               " must be positive");
  TESSEL_CHECK(rope_theta > 1 && std::isfinite(rope_theta), "'rope_theta' ", rope_theta,
               " must be greater than 1");
  TESSEL_CHECK(sliding_window >= 0, "'sliding_window' ", sliding_window,
               " must be positive (or null: no window)");
  TESSEL_CHECK(initializer_range >= 0, "'initializer_range' ", initializer_range, " must be >= 0");
  if (is_moe()) {
    positive("num_local_experts", num_local_experts);
    positive("num_experts_per_tok", num_experts_per_tok);
    TESSEL_CHECK(num_experts_per_tok <= num_local_experts, "'num_experts_per_tok' ",
                 num_experts_per_tok, " exceeds 'num_local_experts' ", num_local_experts,
                 " (each token picks that many distinct experts)");
    TESSEL_CHECK(router_aux_loss_coef >= 0 && std::isfinite(router_aux_loss_coef),
                 "'router_aux_loss_coef' ", router_aux_loss_coef, " must be >= 0");
  }
  if (bos_token_id) {
    TESSEL_CHECK(*bos_token_id >= 0 && *bos_token_id < vocab_size, "'bos_token_id' ", *bos_token_id,
                 " is outside the vocabulary [0, ", vocab_size, ")");
  }
  for (int64_t id : eos_token_ids) {
    TESSEL_CHECK(id >= 0 && id < vocab_size, "'eos_token_id' ", id,
                 " is outside the vocabulary [0, ", vocab_size, ")");
  }
  const RopeScaling& r = rope_scaling;
  if (r.type == RopeScaling::Type::Default) return;
  TESSEL_CHECK(r.factor >= 1 && std::isfinite(r.factor), "rope_scaling 'factor' ", r.factor,
               " must be >= 1");
  if (r.type == RopeScaling::Type::Llama3) {
    TESSEL_CHECK(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor,
                 "rope_scaling 'high_freq_factor' ", r.high_freq_factor,
                 " must be greater than 'low_freq_factor' ", r.low_freq_factor, " (and both > 0)");
    TESSEL_CHECK(r.original_max_position_embeddings > 0,
                 "rope_scaling 'original_max_position_embeddings' ",
                 r.original_max_position_embeddings, " must be positive");
  }
}

std::string LlamaConfig::summary() const {
  std::string s = std::string(variant == LlamaVariant::Llama     ? "Llama "
                              : variant == LlamaVariant::Mistral ? "Mistral "
                              : variant == LlamaVariant::Qwen2   ? "Qwen2 "
                                                                 : "Mixtral ") +
                  std::to_string(num_hidden_layers) + " layers x " + std::to_string(hidden) +
                  " wide, " + std::to_string(num_attention_heads) + " heads";
  if (num_key_value_heads != num_attention_heads)
    s += " / " + std::to_string(num_key_value_heads) + " KV";
  if (head_dim * num_attention_heads != hidden) s += " of " + std::to_string(head_dim);
  if (rope_scaling.type != RopeScaling::Type::Default)
    s += ", rope " + std::string(rope_type_name(rope_scaling.type));
  if (window() > 0) s += ", window " + std::to_string(window());
  if (is_moe())
    s += ", " + std::to_string(num_local_experts) + " experts top-" +
         std::to_string(num_experts_per_tok);
  return s;
}

bool LlamaConfig::same_shapes(const ModelConfig& other) const {
  const auto* o = dynamic_cast<const LlamaConfig*>(&other);
  return o != nullptr && o->vocab_size == vocab_size && o->hidden == hidden &&
         o->intermediate_size == intermediate_size && o->num_hidden_layers == num_hidden_layers &&
         o->num_attention_heads == num_attention_heads &&
         o->num_key_value_heads == num_key_value_heads && o->head_dim == head_dim &&
         o->tie_word_embeddings == tie_word_embeddings && o->qkv_bias() == qkv_bias() &&
         o->o_bias() == o_bias() && o->mlp_biases() == mlp_biases() && o->is_moe() == is_moe() &&
         (!is_moe() || o->num_local_experts == num_local_experts);
}

nn::MoEConfig LlamaConfig::moe_config() const {
  nn::MoEConfig m;
  m.hidden = hidden;
  m.ffn_hidden = intermediate_size;
  m.num_experts = num_local_experts;
  m.top_k = num_experts_per_tok;
  m.gate_form = nn::GateForm::Mixtral;
  m.expert = nn::ExpertKind::SwiGLU;
  m.drop_tokens = false;
  m.aux_loss_coef = router_aux_loss_coef;
  m.z_loss_coef = 0.0;
  return m;
}

int64_t LlamaConfig::max_positions() const {
  if (rope_scaling.type == RopeScaling::Type::Dynamic)
    return int64_t(std::floor(double(max_position_embeddings) * rope_scaling.factor));
  return max_position_embeddings;
}

}  // namespace tessel::models
