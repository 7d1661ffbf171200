// SPDX-License-Identifier: Apache-2.0
// LlamaConfig: config.json of Llama, Mistral and Qwen2 read with Hugging Face's defaults and
// written back, every malformed key one Error naming it, the presets' published parameter counts,
// FLOPs, KV geometry, the rope inverse frequencies of every scaling type, the tensor-parallel plan
// and the registry's dispatch to the family.
#include "tessel/models/llama/llama_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>

#include "tessel/core/error.h"
#include "tessel/models/family.h"
#include "tessel/models/llama/llama_rope.h"

namespace tessel::models {
namespace {

using Json = nlohmann::json;

Json llama_json() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 101,
    "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "rope_scaling": null, "tie_word_embeddings": false,
    "hidden_act": "silu", "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2,
    "attention_bias": false, "mlp_bias": false, "attention_dropout": 0.0,
    "torch_dtype": "bfloat16", "pretraining_tp": 1, "use_cache": true})");
}

LlamaConfig parse(const Json& j) {
  return LlamaConfig::from_json(j.dump(), "test/config.json");
}

// The message of the Error parsing `j` raises ("" when it parses).
std::string error_of(const Json& j) {
  try {
    parse(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LlamaConfig, ReadsEveryKey) {
  LlamaConfig c = parse(llama_json());
  EXPECT_EQ(c.variant, LlamaVariant::Llama);
  EXPECT_EQ(c.vocab_size, 101);
  EXPECT_EQ(c.hidden, 48);
  EXPECT_EQ(c.intermediate_size, 80);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 12);
  EXPECT_EQ(c.max_position_embeddings, 64);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Default);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_id(), 1);
  EXPECT_EQ(c.eos_id(), 2);
  EXPECT_FALSE(c.qkv_bias());
  EXPECT_EQ(c.window(), 0);
  EXPECT_EQ(c.max_positions(), 64);
  EXPECT_EQ(c.kv_geometry().kv_heads, 2);
  EXPECT_EQ(c.kv_geometry().head_dim, 12);
  EXPECT_EQ(c.kv_geometry().bytes_per_token(2), 2 * 2 * 2 * 12 * 2);
}

TEST(LlamaConfig, DefaultsAreHuggingFaces) {
  Json j = llama_json();
  for (const char* key : {"num_key_value_heads", "rms_norm_eps", "rope_theta", "rope_scaling",
                          "tie_word_embeddings", "hidden_act", "bos_token_id", "eos_token_id",
                          "attention_bias", "mlp_bias", "initializer_range"})
    j.erase(key);
  LlamaConfig c = parse(j);
  EXPECT_EQ(c.num_key_value_heads, 4);  // multi-head attention
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.bos_id(), 1);
  EXPECT_EQ(c.eos_id(), 2);
  EXPECT_FALSE(c.tie_word_embeddings);
  // Explicit nulls mean none.
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  c = parse(j);
  EXPECT_FALSE(c.bos_id().has_value());
  EXPECT_FALSE(c.eos_id().has_value());
}

TEST(LlamaConfig, VariantsAndTheirOwnKeys) {
  Json j = llama_json();
  j["architectures"] = {"MistralForCausalLM"};
  j["model_type"] = "mistral";
  j["attention_bias"] = true;          // not a Mistral key: ignored, as transformers does
  EXPECT_EQ(parse(j).window(), 4096);  // MistralConfig's default
  EXPECT_FALSE(parse(j).qkv_bias());
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse(j).window(), 0);
  j["sliding_window"] = 5;
  EXPECT_EQ(parse(j).window(), 5);
  EXPECT_EQ(parse(j).variant, LlamaVariant::Mistral);

  j = llama_json();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = false;
  j["sliding_window"] = 32768;
  LlamaConfig q = parse(j);
  EXPECT_TRUE(q.qkv_bias());
  EXPECT_FALSE(q.o_bias());
  EXPECT_EQ(q.window(), 0);
  j["use_sliding_window"] = true;
  EXPECT_NE(error_of(j).find("'use_sliding_window'"), std::string::npos) << error_of(j);

  // model_type alone chooses the variant; Llama honours attention_bias and mlp_bias.
  j = llama_json();
  j.erase("architectures");
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  LlamaConfig l = parse(j);
  EXPECT_TRUE(l.qkv_bias() && l.o_bias() && l.mlp_biases());
}

TEST(LlamaConfig, WritesTheHuggingFaceLayoutBack) {
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"}) {
    Json j = llama_json();
    j["architectures"] = {arch};
    j.erase("model_type");
    j["head_dim"] = 16;  // q width 64 != hidden 48
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 16}};
    j["eos_token_id"] = {2, 7};
    j["sliding_window"] = 9;
    LlamaConfig a = parse(j);
    LlamaConfig b = LlamaConfig::from_json(a.to_json(), "written");
    EXPECT_EQ(a.to_json(), b.to_json()) << arch;
    EXPECT_TRUE(a.same_shapes(b));
    Json w = Json::parse(a.to_json());
    EXPECT_EQ(w["architectures"][0], arch);
    EXPECT_EQ(w["hidden_size"], 48);
    EXPECT_EQ(w["head_dim"], 16);
    EXPECT_EQ(w["eos_token_id"], Json({2, 7}));
    EXPECT_EQ(w["rope_scaling"]["rope_type"], "llama3");
    EXPECT_EQ(b.eos_token_ids, (std::vector<int64_t>{2, 7}));
    EXPECT_EQ(b.rope_scaling.original_max_position_embeddings, 16);
  }
  // The legacy "type" key is written back as read.
  Json j = llama_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(Json::parse(parse(j).to_json())["rope_scaling"]["type"], "linear");
}

TEST(LlamaConfig, EveryBadKeyIsOneErrorNamingIt) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "max_position_embeddings"}) {
    Json j = llama_json();
    j.erase(key);
    EXPECT_NE(error_of(j).find(std::string("required key '") + key + "' is missing"),
              std::string::npos)
        << error_of(j);
    EXPECT_NE(error_of(j).find("test/config.json"), std::string::npos);
  }
  struct Case {
    const char* key;
    Json value;
    const char* expect;
  };
  const Case cases[] = {
      {"hidden_size", "big", "'hidden_size' must be an integer"},
      {"rms_norm_eps", "tiny", "'rms_norm_eps' must be a number"},
      {"tie_word_embeddings", 1, "'tie_word_embeddings' must be true or false"},
      {"num_key_value_heads", 3,
       "'num_attention_heads' 4 is not a multiple of 'num_key_value_heads' 3"},
      {"num_hidden_layers", 0, "'num_hidden_layers' 0 must be positive"},
      {"head_dim", 7, "'head_dim' 7 must be even"},
      {"hidden_act", "gelu", "'hidden_act' \"gelu\" is not supported"},
      {"attention_dropout", 0.1, "'attention_dropout' 0.1 is not supported"},
      {"rope_theta", 0.5, "'rope_theta' 0.5 must be greater than 1"},
      {"eos_token_id", 101, "'eos_token_id' 101 is outside the vocabulary"},
      {"rope_scaling",
       {{"rope_type", "yarn"}, {"factor", 4.0}},
       "rope type \"yarn\" is not supported"},
      {"rope_scaling", {{"type", "longrope"}, {"factor", 4.0}}, "rope type \"longrope\""},
      {"rope_scaling", {{"rope_type", "linear"}}, "required key 'factor' is missing"},
      {"rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}}, "'factor' 0.5 must be >= 1"},
      {"rope_scaling",
       {{"rope_type", "llama3"},
        {"factor", 8.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 16}},
       "required key 'low_freq_factor' is missing"},
      {"rope_scaling", {{"factor", 2.0}}, "neither 'rope_type' nor 'type'"},
      {"model_type", "gpt2", "model_type \"gpt2\" is not one of"},
  };
  for (const Case& c : cases) {
    Json j = llama_json();
    j[c.key] = c.value;
    if (std::string(c.key) == "model_type") j.erase("architectures");
    const std::string e = error_of(j);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.key << ": " << e;
  }
  // No head_dim and hidden not divisible by the heads.
  Json j = llama_json();
  j["hidden_size"] = 50;
  EXPECT_NE(error_of(j).find("'hidden_size' 50 is not divisible by 'num_attention_heads' 4"),
            std::string::npos)
      << error_of(j);
  EXPECT_NE(error_of(Json::parse("[1]")).find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of(Json::parse("{}")).find("names neither an architecture"), std::string::npos);
}

TEST(LlamaConfig, PresetsHaveThePublishedParameterCounts) {
  const std::pair<const char*, int64_t> published[] = {
      {"smollm-135m", 134515008},  {"tinyllama-1.1b", 1100048384}, {"llama2-7b", 6738415616},
      {"llama3.2-1b", 1235814400}, {"mistral-7b", 7241732096},     {"qwen2-0.5b", 494032768},
  };
  for (auto [name, count] : published)
    EXPECT_EQ(LlamaConfig::preset(name).parameter_count(), count) << name;
  // tiny: the size of GPT-2's tiny preset (11.5M), trained with the same tokenizer.
  LlamaConfig tiny = LlamaConfig::preset("tiny");
  EXPECT_EQ(tiny.parameter_count(), 11223936);
  EXPECT_EQ(tiny.vocab_size, 50257);
  EXPECT_EQ(LlamaConfig::preset("llama3.2-1b").rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_EQ(LlamaConfig::preset("mistral-7b").window(), 4096);
  for (const std::string& name : LlamaConfig::preset_names()) {
    LlamaConfig c = LlamaConfig::preset(name);
    EXPECT_EQ(LlamaConfig::from_json(c.to_json(), name).to_json(), c.to_json()) << name;
  }
  try {
    LlamaConfig::preset("llama-huge");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("smollm-135m"), std::string::npos) << e.what();
  }
}

TEST(LlamaConfig, FlopsFollowGpt2sDefinitions) {
  LlamaConfig c = parse(llama_json());
  const double t = 17, layer = double(c.layer_parameter_count());
  // Untied: the embedding is a lookup; the rest multiplies. Attention over the q width.
  const double matmul = double(c.parameter_count() - c.vocab_size * c.hidden);
  EXPECT_DOUBLE_EQ(c.flops_per_token(17), 6 * matmul + 6 * 2 * 48 * t);
  EXPECT_EQ(c.recompute_flops_per_token(nn::Recompute::None, 17), 0.0);
  const double attention = 2 * 48 * t, qkv = 48.0 * (48 + 2 * 24);
  EXPECT_DOUBLE_EQ(c.recompute_flops_per_token(nn::Recompute::Selective, 17),
                   2 * (2 * (48 + qkv) + attention));
  EXPECT_DOUBLE_EQ(c.recompute_flops_per_token(nn::Recompute::Full, 17),
                   2 * (2 * layer + attention));
  // A sliding window shorter than the sequence: 2w - w^2 / T keys' worth per query.
  Json j = llama_json();
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = 5;
  LlamaConfig m = parse(j);
  EXPECT_DOUBLE_EQ(m.attention_span(17), 10.0 - 25.0 / 17.0);
  EXPECT_DOUBLE_EQ(m.attention_span(4), 4.0);
  // Tied: the embedding is the head's matrix.
  j = llama_json();
  j["tie_word_embeddings"] = true;
  LlamaConfig tied = parse(j);
  EXPECT_DOUBLE_EQ(tied.flops_per_token(17), 6 * double(tied.parameter_count()) + 6 * 2 * 48 * t);
}

TEST(LlamaRope, InverseFrequenciesOfEveryScalingType) {
  LlamaConfig c = parse(llama_json());  // head_dim 12, theta 10000
  std::vector<double> plain = rope_inv_freq(c, 17);
  ASSERT_EQ(plain.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(plain[size_t(i)], std::pow(10000.0, -2.0 * i / 12));

  c.rope_scaling = {RopeScaling::Type::Linear, 2.5};
  for (int i = 0; i < 6; ++i)
    EXPECT_DOUBLE_EQ(rope_inv_freq(c, 17)[size_t(i)], plain[size_t(i)] / 2.5);

  c.rope_scaling = {RopeScaling::Type::Dynamic, 2.0};
  c.max_position_embeddings = 16;
  EXPECT_EQ(rope_inv_freq(c, 16), plain);  // no growth up to max_position_embeddings
  const double base = 10000.0 * std::pow(2.0 * 24 / 16 - 1.0, 12.0 / 10.0);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(rope_inv_freq(c, 24)[size_t(i)], std::pow(base, -2.0 * i / 12), 1e-15);
  EXPECT_EQ(c.max_positions(), 32);

  // llama3 with theta 100, head_dim 16, original 64: wavelengths 2 pi 100^(i/8).
  c.head_dim = 16;
  c.rope_theta = 100.0;
  c.rope_scaling = {RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 64};
  std::vector<double> l3 = rope_inv_freq(c, 17);
  for (int i = 0; i < 8; ++i) {
    const double f = std::pow(100.0, -2.0 * i / 16), wavelen = 2 * std::numbers::pi / f;
    double want = f;  // high band (wavelength < 16): kept
    if (wavelen > 64) {
      want = f / 8;  // low band: divided by the factor
    } else if (wavelen >= 16) {
      const double s = (64 / wavelen - 1) / (4 - 1);
      want = (1 - s) * f / 8 + s * f;
    }
    EXPECT_DOUBLE_EQ(l3[size_t(i)], want) << i;
  }
  EXPECT_LT(l3[7], l3[0] / 100);  // the bands are all present in this setting
}

TEST(LlamaRope, TablesGrowAndFollowDynamicLengths) {
  LlamaConfig c = parse(llama_json());
  c.max_position_embeddings = 16;
  c.rope_scaling = {RopeScaling::Type::Dynamic, 2.0};
  RotaryTables tables(c);
  auto [cos16, sin16] = tables.get(10, DType::F32);
  EXPECT_EQ(cos16.dtype(), DType::F32);
  EXPECT_EQ(cos16.size(1), 6);
  EXPECT_GE(cos16.size(0), 10);
  auto [cos24, sin24] = tables.get(24, DType::F64);
  EXPECT_EQ(cos24.size(0), 24);
  const std::vector<double> inv = rope_inv_freq(c, 24);
  EXPECT_DOUBLE_EQ(cos24.to_vector<double>()[size_t(23 * 6 + 5)], std::cos(23 * inv[5]));
  EXPECT_DOUBLE_EQ(sin24.to_vector<double>()[size_t(7 * 6 + 2)], std::sin(7 * inv[2]));
  EXPECT_EQ(rope_positions(2, 3, 5).to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 5, 6, 7}));
}

TEST(LlamaConfig, TensorParallelPlan) {
  LlamaConfig c = parse(llama_json());  // 4 heads, 2 KV heads, untied vocab 101
  c.vocab_size = 100;
  TensorParallelSpec spec = c.tensor_parallel(2);
  Json plan = Json::parse(spec.plan_json);
  EXPECT_EQ(plan["layers.*.self_attn.k_proj"]["style"], "Colwise");
  EXPECT_EQ(plan["layers.*.self_attn.k_proj"]["unit"], "head_dim");
  EXPECT_EQ(plan["layers.*.self_attn.o_proj"], "Rowwise");
  EXPECT_EQ(plan["layers.*.mlp.down_proj"], "Rowwise");
  EXPECT_EQ(plan["embed_tokens"], "VocabParallel");
  EXPECT_EQ(plan["lm_head"], "Colwise");
  EXPECT_EQ(spec.vocab_parallel_weight, "lm_head.weight");
  EXPECT_EQ(spec.sizes[0], (std::pair<std::string, int64_t>{"head_dim", 12}));
  c.tie_word_embeddings = true;
  plan = Json::parse(c.tensor_parallel(2).plan_json);
  EXPECT_TRUE(plan["norm"]["gather_output"].get<bool>());
  EXPECT_FALSE(plan.contains("lm_head"));
  EXPECT_EQ(c.tensor_parallel(2).vocab_parallel_weight, "embed_tokens.weight");

  auto error = [&](int tp) -> std::string {
    try {
      c.tensor_parallel(tp);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // 2 KV heads over tp 4: each replicated on 2 ranks (q_proj still split per head).
  plan = Json::parse(c.tensor_parallel(4).plan_json);
  EXPECT_TRUE(plan["layers.*.self_attn.k_proj"]["replicate"].get<bool>());
  EXPECT_TRUE(plan["layers.*.self_attn.v_proj"]["replicate"].get<bool>());
  EXPECT_FALSE(plan["layers.*.self_attn.q_proj"].contains("replicate"));
  EXPECT_FALSE(Json::parse(c.tensor_parallel(2).plan_json)["layers.*.self_attn.k_proj"].contains(
      "replicate"));
  c.num_attention_heads = 6;
  c.num_key_value_heads = 3;
  c.head_dim = 8;
  EXPECT_NE(error(2).find("num_key_value_heads = 3 and tp = 2: the KV heads must divide by tp"),
            std::string::npos)
      << error(2);
  c.num_attention_heads = 12;
  c.num_key_value_heads = 4;
  EXPECT_NE(error(6).find("tp must be a multiple of the KV heads"), std::string::npos) << error(6);
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 12;
  EXPECT_NE(error(3).find("num_attention_heads = 4 is not divisible by tp = 3"), std::string::npos);
  c.tie_word_embeddings = false;
  c.vocab_size = 101;
  EXPECT_NE(error(2).find("vocab_size 101 is not divisible by tp = 2"), std::string::npos)
      << error(2);
}

TEST(LlamaFamilyRegistry, EveryArchitectureDispatchesToTheFamily) {
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"}) {
    Json j = llama_json();
    j["architectures"] = {arch};
    j.erase("model_type");
    ConfigPtr c = parse_model_config(j.dump(), "x/config.json");
    EXPECT_EQ(c->family().name(), "llama");
    EXPECT_EQ(c->num_layers(), 2);
    EXPECT_EQ(c->vocabulary_size(), 101);
  }
  EXPECT_EQ(family_named("llama").tokenizer_files(),
            (std::vector<std::string>{"tokenizer.json", "tokenizer.model"}));
  EXPECT_EQ(find_preset("llama:smollm-135m")->parameter_count(), 134515008);
  EXPECT_EQ(find_preset("smollm-135m")->family().name(), "llama");
  // A bare "tiny" stays GPT-2's (the first registered family); LLaMA's is llama:tiny.
  EXPECT_EQ(find_preset("tiny")->family().name(), "gpt2");
  EXPECT_EQ(find_preset("llama:tiny")->parameter_count(), 11223936);
  EXPECT_EQ(family_named("llama").hf_name("layers.3.mlp.up_proj.weight"),
            "model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(family_named("llama").hf_name("lm_head.weight"), "lm_head.weight");
  try {
    parse_model_config(R"({"architectures": ["GemmaForCausalLM"], "model_type": "gemma"})", "g");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Qwen2ForCausalLM"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessel::models
