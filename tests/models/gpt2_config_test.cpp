// SPDX-License-Identifier: Apache-2.0
// GPT2Config from Hugging Face config.json: published keys, aliases, nulls, unknown keys, and a
// clear error for each wrong type, range or unsupported setting; the four published sizes and
// their parameter counts.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tessel/models/gpt2/gpt2.h"

namespace tessel::models {
namespace {

// config.json of the published 124M model.
const char* kGpt2Json = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
  "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
  "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null,
  "summary_first_dropout": 0.1, "summary_proj_to_labels": true, "summary_type": "cls_index",
  "summary_use_proj": true, "task_specific_params": {"text-generation": {"do_sample": true,
  "max_length": 50}}, "vocab_size": 50257})";

void expect_error(const std::string& json, const std::string& part) {
  try {
    GPT2Config::from_json(json);
    FAIL() << "accepted: " << json;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "'" << part << "' not in: " << e.what();
  }
}

TEST(GPT2Config, ParsesThePublishedConfig) {
  GPT2Config c = GPT2Config::from_json(kGpt2Json);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.n_positions, 1024);
  EXPECT_EQ(c.n_embd, 768);
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_head, 12);
  EXPECT_EQ(c.inner(), 3072);
  EXPECT_DOUBLE_EQ(c.layer_norm_epsilon, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.parameter_count(), 124439808);
}

TEST(GPT2Config, AcceptsAliasesNullInnerAndUnknownKeys) {
  GPT2Config c = GPT2Config::from_json(
      R"({"hidden_size": 48, "num_attention_heads": 3, "num_hidden_layers": 2,
          "max_position_embeddings": 17, "vocab_size": 101, "n_inner": null,
          "some_future_key": [1, 2], "tie_word_embeddings": false, "layer_norm_epsilon": 1e-6})");
  EXPECT_EQ(c.n_embd, 48);
  EXPECT_EQ(c.n_head, 3);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_positions, 17);
  EXPECT_EQ(c.inner(), 192);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(GPT2Config::from_json(R"({"n_inner": 33})").inner(), 33);
  GPT2Config back = GPT2Config::from_json(c.to_json());
  EXPECT_EQ(back.n_embd, 48);
  EXPECT_EQ(back.n_positions, 17);
  EXPECT_FALSE(back.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(back.layer_norm_epsilon, 1e-6);
}

TEST(GPT2Config, RejectsUnsupportedSettingsAndBadValues) {
  expect_error(R"({"activation_function": "relu"})",
               "activation_function \"relu\" is not supported");
  expect_error(R"({"activation_function": "gelu"})", "activation_function \"gelu\"");
  expect_error(R"({"scale_attn_by_inverse_layer_idx": true})", "scale_attn_by_inverse_layer_idx");
  expect_error(R"({"reorder_and_upcast_attn": true})", "reorder_and_upcast_attn");
  expect_error(R"({"scale_attn_weights": false})", "scale_attn_weights");
  expect_error(R"({"n_embd": "768"})", "'n_embd' must be an integer");
  expect_error(R"({"n_embd": 768.5})", "'n_embd' must be an integer");
  expect_error(R"({"n_embd": 64, "hidden_size": 128})", "disagree");
  expect_error(R"({"n_embd": 100, "n_head": 12})",
               "n_embd 100 must be a positive multiple of n_head 12");
  expect_error(R"({"n_layer": 0})", "n_layer 0 must be positive");
  expect_error(R"({"vocab_size": -3})", "vocab_size -3");
  expect_error(R"({"n_inner": 0})", "'n_inner' 0 must be positive or null");
  expect_error(R"({"layer_norm_epsilon": "small"})", "'layer_norm_epsilon' must be a number");
  expect_error(R"({"resid_pdrop": 1.5})", "resid_pdrop 1.5");
  expect_error(R"({"tie_word_embeddings": 1})", "'tie_word_embeddings' must be true or false");
  expect_error(R"({"model_type": "llama"})", "model_type \"llama\" is not \"gpt2\"");
  expect_error("[1, 2]", "expected a JSON object");
  expect_error("{\"n_embd\": ", "not valid JSON");
  EXPECT_THROW(GPT2Config::from_file("/nonexistent/config.json"), Error);
}

TEST(GPT2Config, PublishedSizesHaveTheirParameterCounts) {
  struct Size {
    const char* name;
    int64_t params;
  };
  for (Size s : {Size{"124M", 124439808}, Size{"355M", 354823168}, Size{"774M", 774030080},
                 Size{"1558M", 1557611200}}) {
    GPT2Config c = GPT2Config::preset(s.name);
    EXPECT_EQ(c.parameter_count(), s.params) << s.name;
    // Built shape-only: the parameters are allocated but never touched.
    GPT2 model(c, nn::Init::none());
    EXPECT_EQ(model.parameter_count(), s.params) << s.name;
    EXPECT_EQ(int64_t(model.blocks.size()), c.n_layer);
    EXPECT_EQ(model.find("h.0.attn.c_attn.weight").shape(), (Shape{3 * c.n_embd, c.n_embd}));
  }
  EXPECT_EQ(GPT2Config::preset("1.5B").n_embd, 1600);
  // The size words name the same models; every listed name is a preset.
  EXPECT_EQ(GPT2Config::preset("small").parameter_count(), 124439808);
  EXPECT_EQ(GPT2Config::preset("xl").parameter_count(), 1557611200);
  EXPECT_EQ(GPT2Config::preset("tiny").parameter_count(), 11478336);  // README's figure
  for (const std::string& name : GPT2Config::preset_names())
    EXPECT_NO_THROW(GPT2Config::preset(name));
  EXPECT_THROW(GPT2Config::preset("7B"), Error);
  GPT2Config untied = GPT2Config::preset("124M");
  untied.tie_word_embeddings = false;
  EXPECT_EQ(untied.parameter_count(), 124439808 + 50257 * 768);
}

TEST(GPT2Config, SmallestSizeBuildsWithRandomWeightsAndRuns) {
  Generator g(2024);
  auto model = GPT2::random(GPT2Config::preset("124M"), g);
  EXPECT_EQ(model->parameter_count(), 124439808);
  model->eval();
  Tensor logits = model->forward(from_data(std::vector<int64_t>{464, 3290, 50256}, Shape{1, 3}));
  EXPECT_EQ(logits.shape(), (Shape{1, 3, 50257}));
  for (float v : logits.to_vector<float>()) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace tessel::models
