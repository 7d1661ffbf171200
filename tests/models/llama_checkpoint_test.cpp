// SPDX-License-Identifier: Apache-2.0
// The LLaMA family in the Hugging Face layout through the generic save_model / load_model: save ->
// load is bit-exact (single file and shards with an index, tied and untied, Qwen2), names are
// "model." + tessel's (lm_head.weight as is), rotary inv_freq buffers and an equal tied head are
// accepted, and every bad input is one clear error: a config missing a required key, an
// unsupported rope_scaling type, weights whose shapes disagree with the config, missing and
// unexpected tensors, a different tied head.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/per_test_dir.h"
#include "tessel/core/error.h"
#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/models/llama/llama_family.h"

namespace tessel::models {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

LlamaConfig tiny(LlamaVariant variant = LlamaVariant::Llama, bool tied = false) {
  LlamaConfig c;
  c.variant = variant;
  c.vocab_size = 53;
  c.hidden = 16;
  c.intermediate_size = 28;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 32;
  c.tie_word_embeddings = tied;
  return c;
}

class LlamaCheckpoint : public ::tessel::test::PerTestDir {
 protected:
  LlamaCheckpoint() : PerTestDir("tessel_llama_ckpt", /*create=*/false) {}
  std::string dir(const std::string& sub = "") const { return (dir_ / sub).string(); }

  // config.json text and the given tensors as model.safetensors in dir(sub).
  void write(const std::string& sub, const std::string& config_json, const io::NamedTensors& t) {
    fs::create_directories(dir(sub));
    std::ofstream(dir_ / sub / "config.json") << config_json;
    io::save_safetensors((dir_ / sub / "model.safetensors").string(), t);
  }
};

void expect_bitwise_equal(const CausalLM& a, const CausalLM& b) {
  auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    ASSERT_EQ(sa[i].first, sb[i].first);
    ASSERT_EQ(sa[i].second.shape(), sb[i].second.shape()) << sa[i].first;
    EXPECT_EQ(std::memcmp(sa[i].second.data_ptr(), sb[i].second.data_ptr(), sa[i].second.nbytes()),
              0)
        << sa[i].first;
  }
}

void expect_error(const std::function<void()>& fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    FAIL() << "no error";
  } catch (const Error& e) {
    for (const char* p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << p << " not in: " << e.what();
  }
}

TEST_F(LlamaCheckpoint, SaveLoadIsBitExactInEveryLayout) {
  struct Case {
    const char* sub;
    LlamaConfig config;
    uint64_t shard_bytes;
  };
  LlamaConfig biased = tiny();
  biased.attention_bias = biased.mlp_bias = true;
  for (const Case& c :
       {Case{"untied", tiny(), uint64_t(5) << 30},
        Case{"tied", tiny(LlamaVariant::Llama, true), uint64_t(5) << 30},
        Case{"sharded", biased, 4096}, Case{"qwen2", tiny(LlamaVariant::Qwen2, true), 4096}}) {
    Generator g(17);
    std::shared_ptr<CausalLM> model = c.config.build_random(g);
    model->eval();
    Tensor ids = from_data(std::vector<int64_t>{1, 7, 52, 3, 3, 0, 45}, Shape{1, 7});
    std::vector<float> logits = model->forward(ids).to_vector<float>();
    save_model(*model, dir(c.sub), {c.shard_bytes});
    auto loaded = load_model(dir(c.sub));
    expect_bitwise_equal(*model, *loaded);
    EXPECT_EQ(loaded->forward(ids).to_vector<float>(), logits) << c.sub;
    EXPECT_EQ(loaded->model_config().to_json(), c.config.to_json()) << c.sub;
    EXPECT_EQ(fs::exists(dir(std::string(c.sub) + "/model.safetensors.index.json")),
              c.shard_bytes < 10000)
        << c.sub;
  }
  auto file = io::SafetensorsFile::open(dir("untied/model.safetensors"));
  EXPECT_TRUE(file.contains("model.embed_tokens.weight"));
  EXPECT_TRUE(file.contains("model.layers.1.self_attn.o_proj.weight"));
  EXPECT_TRUE(file.contains("model.norm.weight"));
  EXPECT_TRUE(file.contains("lm_head.weight"));  // outside "model.", as HF stores it
  EXPECT_FALSE(io::SafetensorsFile::open(dir("tied/model.safetensors")).contains("lm_head.weight"));
  // A sharded directory's index names every tensor.
  std::ifstream index(dir("sharded/model.safetensors.index.json"));
  Json j = Json::parse(index);
  EXPECT_TRUE(j["weight_map"].contains("model.layers.0.mlp.down_proj.bias"));
}

TEST_F(LlamaCheckpoint, BuffersAnEqualTiedHeadAndUnprefixedNamesAreAccepted) {
  LlamaConfig c = tiny(LlamaVariant::Llama, true);
  Generator g(20);
  auto model = std::dynamic_pointer_cast<Llama>(c.build_random(g));
  io::NamedTensors t;
  for (auto& [name, value] : llama_to_hf(*model)) {
    // The bare LlamaModel layout (no "model." prefix) for some tensors.
    t.emplace_back(name.find("layers.1.") != std::string::npos ? name.substr(6) : name, value);
  }
  t.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", ones({2}));
  t.emplace_back("lm_head.weight", model->embed_tokens->weight.clone());
  write("m", c.to_json(), t);
  expect_bitwise_equal(*model, *load_model(dir("m")));
}

TEST_F(LlamaCheckpoint, ADifferentTiedHeadIsAnError) {
  LlamaConfig c = tiny(LlamaVariant::Llama, true);
  Generator g(21);
  auto model = std::dynamic_pointer_cast<Llama>(c.build_random(g));
  io::NamedTensors t = llama_to_hf(*model);
  t.emplace_back("lm_head.weight", zeros({53, 16}));
  write("m", c.to_json(), t);
  expect_error(
      [&] { load_model(dir("m")); },
      {"lm_head.weight differs from model.embed_tokens.weight", "tie_word_embeddings is true"});
}

TEST_F(LlamaCheckpoint, OneErrorListsEveryMissingUnexpectedAndMisshapedTensor) {
  LlamaConfig c = tiny();
  Generator g(22);
  auto model = std::dynamic_pointer_cast<Llama>(c.build_random(g));
  io::NamedTensors t;
  for (auto& [name, value] : llama_to_hf(*model)) {
    if (name == "model.norm.weight" || name == "lm_head.weight") continue;
    t.emplace_back(name, value);
  }
  t.emplace_back("model.layers.0.self_attn.q_proj.bias", zeros({16}));
  write("m", c.to_json(), t);
  expect_error(
      [&] { load_model(dir("m")); },
      {"load LlamaForCausalLM checkpoint", "2 missing", "model.norm.weight [16]",
       "lm_head.weight [53, 16]", "1 unexpected", "model.layers.0.self_attn.q_proj.bias [16]"});
}

TEST_F(LlamaCheckpoint, WeightsShapedForAnotherConfigAreOneError) {
  // Weights of a model with intermediate_size 28 under a config that says 32, and 2 KV heads
  // under a config that says 4 (MHA).
  LlamaConfig c = tiny();
  Generator g(23);
  auto model = std::dynamic_pointer_cast<Llama>(c.build_random(g));
  Json j = Json::parse(c.to_json());
  j["intermediate_size"] = 32;
  j["num_key_value_heads"] = 4;
  write("m", j.dump(), llama_to_hf(*model));
  expect_error(
      [&] { load_model(dir("m")); },
      {"mis-shaped", "model.layers.0.self_attn.k_proj.weight (expected [16, 16], got [8, 16])",
       "model.layers.0.mlp.gate_proj.weight (expected [32, 16], got [28, 16])"});
}

TEST_F(LlamaCheckpoint, BadConfigsAreOneErrorNamingTheKey) {
  LlamaConfig c = tiny();
  Generator g(24);
  auto model = std::dynamic_pointer_cast<Llama>(c.build_random(g));
  Json j = Json::parse(c.to_json());
  j.erase("num_hidden_layers");
  write("missing", j.dump(), llama_to_hf(*model));
  expect_error([&] { load_model(dir("missing")); },
               {"missing/config.json", "required key 'num_hidden_layers' is missing"});
  j = Json::parse(c.to_json());
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  write("yarn", j.dump(), llama_to_hf(*model));
  expect_error(
      [&] { load_model(dir("yarn")); },
      {"yarn/config.json", "rope type \"yarn\" is not supported", "linear, dynamic, llama3"});
  j = Json::parse(c.to_json());
  j["architectures"] = {"FalconForCausalLM"};
  j["model_type"] = "falcon";
  write("falcon", j.dump(), llama_to_hf(*model));
  expect_error([&] { load_model(dir("falcon")); },
               {"unsupported architecture [FalconForCausalLM]", "LlamaForCausalLM",
                "MistralForCausalLM", "Qwen2ForCausalLM"});
}

TEST_F(LlamaCheckpoint, HalfPrecisionWeightsWidenOnLoad) {
  LlamaConfig c = tiny();
  Generator g(25);
  auto model = std::dynamic_pointer_cast<Llama>(c.build_random(g));
  io::NamedTensors t;
  for (auto& [name, value] : llama_to_hf(*model)) t.emplace_back(name, value.to(DType::BF16));
  write("m", c.to_json(), t);
  auto loaded = std::dynamic_pointer_cast<Llama>(load_model(dir("m")));
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->embed_tokens->weight.dtype(), DType::F32);
  EXPECT_EQ(loaded->lm_head->weight.to_vector<float>(),
            model->lm_head->weight.to(DType::BF16).to(DType::F32).to_vector<float>());
}

}  // namespace
}  // namespace tessel::models
