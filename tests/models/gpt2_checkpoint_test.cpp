// SPDX-License-Identifier: Apache-2.0
// GPT-2 in the Hugging Face layout: save -> load is bit-exact (single file, shards, with and
// without the `transformer.` prefix, tied and untied heads), Conv1D weights are stored [in, out],
// mask buffers are skipped, and every malformed checkpoint gives one error naming the tensors.
#include "tessel/models/gpt2/gpt2_checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/per_test_dir.h"
#include "tessel/io/safetensors_dir.h"

namespace tessel::models {
namespace {

namespace fs = std::filesystem;

GPT2Config tiny_config() {
  GPT2Config c;
  c.vocab_size = 101;
  c.n_positions = 17;
  c.n_embd = 12;
  c.n_head = 3;
  c.n_layer = 2;
  return c;
}

class Gpt2Checkpoint : public ::tessel::test::PerTestDir {
 protected:
  Gpt2Checkpoint() : PerTestDir("tessel_gpt2_ckpt", /*create=*/false) {}
  std::string dir(const std::string& sub = "") const { return (dir_ / sub).string(); }

  // Writes config.json for `config` and the given tensors as model.safetensors into dir(sub).
  void write(const std::string& sub, const GPT2Config& config, const io::NamedTensors& tensors) {
    fs::create_directories(dir(sub));
    std::ofstream(dir_ / sub / "config.json") << config.to_json();
    io::save_safetensors((dir_ / sub / "model.safetensors").string(), tensors);
  }
};

void expect_bitwise_equal(const GPT2& a, const GPT2& b) {
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
    for (const char* p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << p << " not in: " << e.what();
    }
  }
}

TEST_F(Gpt2Checkpoint, SaveLoadIsBitExactInEveryLayout) {
  Generator g(17);
  auto model = GPT2::random(tiny_config(), g);
  Tensor ids = from_data(std::vector<int64_t>{1, 7, 100, 3, 3, 0, 55}, Shape{1, 7});
  model->eval();
  std::vector<float> logits = model->forward(ids).to_vector<float>();
  struct Layout {
    const char* sub;
    GPT2SaveOptions options;
  };
  for (Layout l :
       {Layout{"plain", {"", uint64_t(5) << 30}},
        Layout{"prefixed", {"transformer.", uint64_t(5) << 30}}, Layout{"sharded", {"", 4096}}}) {
    save_gpt2(*model, dir(l.sub), l.options);
    auto loaded = load_gpt2(dir(l.sub));
    expect_bitwise_equal(*model, *loaded);
    EXPECT_EQ(loaded->forward(ids).to_vector<float>(), logits) << l.sub;
  }
  EXPECT_TRUE(fs::exists(dir("sharded/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir("plain/model.safetensors.index.json")));
  auto file = io::SafetensorsFile::open(dir("prefixed/model.safetensors"));
  EXPECT_TRUE(file.contains("transformer.wte.weight"));
  EXPECT_FALSE(file.contains("lm_head.weight"));  // tied: not stored
}

TEST_F(Gpt2Checkpoint, Conv1dWeightsAreStoredInOut) {
  Generator g(18);
  auto model = GPT2::random(tiny_config(), g);
  save_gpt2(*model, dir("m"));
  auto file = io::SafetensorsFile::open(dir("m/model.safetensors"));
  EXPECT_EQ(file.entry("h.0.attn.c_attn.weight").shape, (Shape{12, 36}));
  EXPECT_EQ(file.entry("h.1.attn.c_proj.weight").shape, (Shape{12, 12}));
  EXPECT_EQ(file.entry("h.0.mlp.c_fc.weight").shape, (Shape{12, 48}));
  EXPECT_EQ(file.entry("h.0.mlp.c_proj.weight").shape, (Shape{48, 12}));
  EXPECT_EQ(file.entry("wte.weight").shape, (Shape{101, 12}));
  Tensor stored = file.load("h.0.mlp.c_fc.weight");
  Tensor ours = model->blocks[0]->mlp->c_fc->weight;  // [48, 12]
  EXPECT_EQ(stored.at(std::vector<int64_t>{5, 40}), ours.at(std::vector<int64_t>{40, 5}));
  EXPECT_EQ(stored.transpose(0, 1).to_vector<float>(), ours.to_vector<float>());
}

TEST_F(Gpt2Checkpoint, UntiedHeadIsSavedAndLoaded) {
  GPT2Config c = tiny_config();
  c.tie_word_embeddings = false;
  Generator g(19);
  auto model = GPT2::random(c, g);
  ASSERT_TRUE(model->lm_head);
  save_gpt2(*model, dir("m"), {"transformer.", uint64_t(5) << 30});
  auto file = io::SafetensorsFile::open(dir("m/model.safetensors"));
  EXPECT_TRUE(file.contains("lm_head.weight"));  // outside the prefix, as HF stores it
  auto loaded = load_gpt2(dir("m"));
  EXPECT_FALSE(loaded->config().tie_word_embeddings);
  expect_bitwise_equal(*model, *loaded);
}

TEST_F(Gpt2Checkpoint, MaskBuffersAndAnEqualTiedHeadAreAccepted) {
  Generator g(20);
  auto model = GPT2::random(tiny_config(), g);
  io::NamedTensors t = gpt2_to_hf(*model, "transformer.");
  t.emplace_back("transformer.h.0.attn.bias", ones({1, 1, 17, 17}));
  t.emplace_back("transformer.h.1.attn.masked_bias", full({}, -1e4));
  t.emplace_back("lm_head.weight", model->wte->weight.clone());
  write("m", model->config(), t);
  expect_bitwise_equal(*model, *load_gpt2(dir("m")));
}

TEST_F(Gpt2Checkpoint, ADifferentTiedHeadIsAnError) {
  Generator g(21);
  auto model = GPT2::random(tiny_config(), g);
  io::NamedTensors t = gpt2_to_hf(*model);
  t.emplace_back("lm_head.weight", zeros({101, 12}));
  write("m", model->config(), t);
  expect_error([&] { load_gpt2(dir("m")); },
               {"lm_head.weight differs from wte.weight", "tie_word_embeddings is true"});
}

TEST_F(Gpt2Checkpoint, OneErrorListsEveryMissingUnexpectedAndMisshapedTensor) {
  Generator g(22);
  auto model = GPT2::random(tiny_config(), g);
  io::NamedTensors t;
  for (auto& [name, value] : gpt2_to_hf(*model)) {
    if (name == "ln_f.bias" || name == "h.1.mlp.c_fc.bias") continue;
    // Untransposed Conv1D weight: the classic mistake when writing the HF layout by hand.
    if (name == "h.0.attn.c_attn.weight") {
      t.emplace_back(name, value.transpose(0, 1));
      continue;
    }
    t.emplace_back(name, value);
  }
  t.emplace_back("h.0.attn.q_proj.weight", zeros({12, 12}));
  write("m", model->config(), t);
  expect_error(
      [&] { load_gpt2(dir("m")); },
      {"2 missing", "ln_f.bias", "h.1.mlp.c_fc.bias", "1 unexpected", "h.0.attn.q_proj.weight",
       "1 mis-shaped", "h.0.attn.c_attn.weight (expected [12, 36], got [36, 12])"});
}

TEST_F(Gpt2Checkpoint, NameStoredWithAndWithoutPrefixIsAnError) {
  Generator g(23);
  auto model = GPT2::random(tiny_config(), g);
  io::NamedTensors t = gpt2_to_hf(*model);
  t.emplace_back("transformer.wpe.weight", model->wpe->weight.clone());
  write("m", model->config(), t);
  expect_error([&] { load_gpt2(dir("m")); }, {"'wpe.weight' is stored both"});
}

TEST_F(Gpt2Checkpoint, MissingConfigOrWeightsAreErrors) {
  fs::create_directories(dir("empty"));
  expect_error([&] { load_gpt2(dir("empty")); }, {"config.json", "not found"});
  std::ofstream(dir_ / "empty" / "config.json") << tiny_config().to_json();
  EXPECT_THROW(load_gpt2(dir("empty")), Error);
}

TEST_F(Gpt2Checkpoint, HalfPrecisionWeightsConvertOnLoad) {
  Generator g(24);
  auto model = GPT2::random(tiny_config(), g);
  io::NamedTensors t;
  for (auto& [name, value] : gpt2_to_hf(*model)) t.emplace_back(name, value.to(DType::BF16));
  write("m", model->config(), t);
  auto loaded = load_gpt2(dir("m"));
  Tensor want = model->wte->weight.to(DType::BF16).to(DType::F32);
  EXPECT_EQ(loaded->wte->weight.dtype(), DType::F32);
  EXPECT_EQ(loaded->wte->weight.to_vector<float>(), want.to_vector<float>());
}

}  // namespace
}  // namespace tessel::models
