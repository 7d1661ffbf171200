// SPDX-License-Identifier: Apache-2.0
// GPT-2 and LLaMA through GGUF: a model saved in the Hugging Face layout and exported to GGUF F32
// gives bit-identical logits; F16 / BF16 stay within a bound and F16 greedy generation picks the
// same 32 tokens; LLaMA's q/k rows are stored in Meta's interleaved order; tied and untied heads;
// config keys; an unknown type is a clear error; a GGUF with a Q8_0 matrix loads with it quantized
// (quantized_model_test.cpp covers quantized models). Mixtral round-trips the same way under
// llama.cpp's names (architecture "llama", llama.expert_count, stacked blk.N.ffn_*_exps), and its
// Q8_0 export loads with the expert stacks kept as Q8_0 blocks.
#include "tessel/models/gguf_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "common/error_text.h"
#include "common/per_test_dir.h"
#include "common/tokenizer_test_util.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/models/generation.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"
#include "tessel/models/llama/llama_gguf.h"
#include "tessel/models/mixtral/mixtral_family.h"

namespace tessel::models {
namespace {

namespace fs = std::filesystem;

class GgufModel : public ::tessel::test::PerTestDir {
 protected:
  GgufModel() : PerTestDir("tessel_gguf_model") {}
};

GPT2Config tiny_gpt2(bool tied = true) {
  GPT2Config c;
  c.vocab_size = 61;
  c.n_positions = 64;
  c.n_embd = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  c.tie_word_embeddings = tied;
  c.bos_token_id = c.eos_token_id = 60;
  c.initializer_range = 0.3;  // peaked logits, so greedy choices are not near-ties
  return c;
}

LlamaConfig tiny_llama(bool tied = false) {
  LlamaConfig c;
  c.vocab_size = 53;
  c.hidden = 16;
  c.intermediate_size = 28;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  c.rms_norm_eps = 1e-5;
  c.initializer_range = 0.3;
  return c;
}

// Rows of 32 and 64: whole Q8_0 blocks for every matrix.
LlamaConfig tiny_mixtral() {
  LlamaConfig c = tiny_llama();
  c.variant = LlamaVariant::Mixtral;
  c.hidden = 32;
  c.intermediate_size = 64;
  c.head_dim = 8;
  c.num_local_experts = 4;
  c.num_experts_per_tok = 2;
  return c;
}

Tensor some_ids(int64_t vocab) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 13; ++i) v.push_back((i * 7 + 3) % vocab);
  return from_data(v, Shape{1, 13});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const float *pa = a.data<float>(), *pb = b.data<float>();
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(double(pa[i]) - double(pb[i])));
  return m;
}

double max_abs(const Tensor& a) {
  const float* p = a.data<float>();
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(double(p[i])));
  return m;
}

std::vector<int64_t> greedy(CausalLM& model, int64_t n) {
  GenerationOptions options;
  options.max_new_tokens = n;
  options.sampling.temperature = 0;
  return generate(model, {1, 2, 3}, options).tokens;
}

// HF directory -> model -> GGUF of each type -> model: F32 is exact, F16 / BF16 are close, F16
// greedy generation agrees for 32 tokens.
void check_exports(const ModelConfig& config, const std::string& dir, const std::string& stem) {
  autograd::NoGradGuard no_grad;
  Generator gen(1234);
  save_model(*config.build_random(gen), dir + "/hf");
  auto reference = load_model(dir + "/hf");
  const Tensor ids = some_ids(config.vocabulary_size());
  const Tensor want = reference->forward(ids);
  for (const std::string type : {"f32", "f16", "bf16"}) {
    const std::string file = dir + "/" + stem + "-" + type + ".gguf";
    int reports = 0;
    save_gguf_model(*reference, file, {type, stem, nullptr}, [&](const GgufTensorReport& r) {
      ++reports;
      EXPECT_GE(r.count, reference->state_dict().size());  // + output.weight when tied
      if (type == "f32") {
        EXPECT_EQ(r.max_abs_error, 0.0) << r.name;
      } else if (r.shape.ndim() >= 2) {
        EXPECT_GT(r.rel_rms_error, 0.0) << r.name;
      }
      EXPECT_LT(r.rel_rms_error, type == "bf16" ? 1e-2 : 1e-3) << r.name;
    });
    EXPECT_GT(reports, 0);
    EXPECT_TRUE(is_gguf_model(file));
    auto loaded = load_model_source(file);
    EXPECT_TRUE(loaded->model_config().same_shapes(config)) << type;
    const Tensor got = loaded->forward(ids);
    const double diff = max_abs_diff(got, want);
    if (type == "f32") {
      EXPECT_EQ(diff, 0.0);
    } else {
      EXPECT_LT(diff, (type == "bf16" ? 5e-2 : 5e-3) * max_abs(want)) << type;
    }
    if (type == "f16") {
      EXPECT_EQ(greedy(*loaded, 32), greedy(*reference, 32));
    }
  }
}

TEST_F(GgufModel, Gpt2ExportsMatchTheSafetensorsModel) {
  check_exports(tiny_gpt2(), dir_.string(), "gpt2");
}

TEST_F(GgufModel, Gpt2UntiedHeadRoundTrips) {
  check_exports(tiny_gpt2(false), dir_.string(), "gpt2-untied");
  io::GgufFile f = io::GgufFile::open(path("gpt2-untied-f32.gguf"));
  EXPECT_TRUE(f.contains("output.weight"));
  EXPECT_FALSE(gguf_same_bytes(f, "output.weight", "token_embd.weight"));
}

TEST_F(GgufModel, LlamaExportsMatchTheSafetensorsModel) {
  check_exports(tiny_llama(), dir_.string(), "llama");
  check_exports(tiny_llama(true), dir_.string(), "llama-tied");
}

TEST_F(GgufModel, Gpt2KeysAndNamesFollowTheSpec) {
  Generator gen(5);
  auto model = tiny_gpt2().build_random(gen);
  save_gguf_model(*model, path("g.gguf"), {"f16", "tiny", nullptr});
  io::GgufFile f = io::GgufFile::open(path("g.gguf"));
  const io::GgufMetadata& m = f.metadata();
  EXPECT_EQ(m.at("general.architecture", "").as_string(""), "gpt2");
  EXPECT_EQ(m.at("general.file_type", "").as_int(""), 1);
  EXPECT_EQ(m.at("gpt2.context_length", "").as_int(""), 64);
  EXPECT_EQ(m.at("gpt2.embedding_length", "").as_int(""), 16);
  EXPECT_EQ(m.at("gpt2.block_count", "").as_int(""), 2);
  EXPECT_EQ(m.at("gpt2.feed_forward_length", "").as_int(""), 64);
  EXPECT_EQ(m.at("gpt2.attention.head_count", "").as_int(""), 4);
  // u32, as llama.cpp requires (a u64 context_length makes it refuse the file).
  for (const char* k : {"gpt2.context_length", "gpt2.embedding_length", "gpt2.block_count",
                        "gpt2.feed_forward_length", "gpt2.attention.head_count"})
    EXPECT_EQ(m.at(k, "").type, io::GgufType::U32) << k;
  EXPECT_EQ(m.at("tokenizer.ggml.eos_token_id", "").as_int(""), 60);
  // Linear layout [out, in] = ggml dims {in, out}; norms stay F32; the tied head is written.
  EXPECT_EQ(f.info("blk.0.attn_qkv.weight").dims, (std::vector<uint64_t>{16, 48}));
  EXPECT_EQ(f.info("blk.1.ffn_down.weight").dims, (std::vector<uint64_t>{64, 16}));
  EXPECT_EQ(f.info("blk.0.attn_qkv.weight").type, io::ggml::kF16);
  EXPECT_EQ(f.info("blk.0.attn_norm.bias").type, io::ggml::kF32);
  EXPECT_EQ(f.info("position_embd.weight").dims, (std::vector<uint64_t>{16, 64}));
  EXPECT_TRUE(gguf_same_bytes(f, "output.weight", "token_embd.weight"));
}

TEST_F(GgufModel, TokenListIsPaddedToTheVocabulary) {
  // A tokenizer of 262 tokens in a model of 269 rows: GGUF readers (llama.cpp) take the vocabulary
  // from the token list and refuse a token_embd of another height, so the list is padded.
  GPT2Config c = tiny_gpt2();
  c.vocab_size = 269;
  c.bos_token_id = c.eos_token_id = 261;
  Generator gen(7);
  auto model = c.build_random(gen);
  const io::Tokenizer tok(io::small_config());
  ASSERT_LT(tok.vocab_size(), c.vocab_size);
  save_gguf_model(*model, path("p.gguf"), {"q8_0", "tiny", &tok});
  io::GgufFile f = io::GgufFile::open(path("p.gguf"));
  const auto& tokens = f.metadata().at("tokenizer.ggml.tokens", "").as_array("");
  ASSERT_EQ(tokens.size(), size_t(c.vocab_size));
  EXPECT_EQ(f.info("token_embd.weight").dims[1], uint64_t(c.vocab_size));
  const size_t n = size_t(tok.vocab_size());
  EXPECT_EQ(tokens[n - 1].as_string(""), tok.token(int32_t(n - 1)));
  EXPECT_EQ(tokens[n].as_string(""), "[PAD" + std::to_string(n) + "]");
  EXPECT_EQ(tokens.back().as_string(""), "[PAD268]");
}

TEST_F(GgufModel, LlamaQkRowsAreStoredInterleaved) {
  // Rows of one head of size 4: rotate_half order (0, 1 | 2, 3) pairs 0-2 and 1-3; interleaved
  // order puts each pair side by side: 0, 2, 1, 3.
  const Tensor w = from_data(std::vector<float>{0, 1, 2, 3, 10, 11, 12, 13}, Shape{8, 1});
  const Tensor meta = llama_permute_rope_rows(w, 2, true);
  EXPECT_EQ(std::vector<float>(meta.data<float>(), meta.data<float>() + 8),
            (std::vector<float>{0, 2, 1, 3, 10, 12, 11, 13}));
  const Tensor back = llama_permute_rope_rows(meta, 2, false);
  EXPECT_EQ(max_abs_diff(back, w), 0.0);

  Generator gen(9);
  auto model = tiny_llama().build_random(gen);
  save_gguf_model(*model, path("l.gguf"), {"f32", "tiny", nullptr});
  io::GgufFile f = io::GgufFile::open(path("l.gguf"));
  const Tensor q = f.load("blk.0.attn_q.weight"), k = f.load("blk.1.attn_k.weight");
  const auto state = model->state_dict();
  auto param = [&](const std::string& n) {
    for (auto& [name, t] : state)
      if (name == n) return t;
    return Tensor();
  };
  EXPECT_EQ(
      max_abs_diff(q, llama_permute_rope_rows(param("layers.0.self_attn.q_proj.weight"), 4, true)),
      0.0);
  EXPECT_EQ(
      max_abs_diff(k, llama_permute_rope_rows(param("layers.1.self_attn.k_proj.weight"), 2, true)),
      0.0);
  EXPECT_GT(max_abs_diff(q, param("layers.0.self_attn.q_proj.weight")), 0.0);
  const io::GgufMetadata& m = f.metadata();
  EXPECT_EQ(m.at("llama.attention.head_count_kv", "").as_int(""), 2);
  EXPECT_EQ(m.at("llama.rope.dimension_count", "").as_int(""), 4);
  for (const char* k :
       {"llama.context_length", "llama.block_count", "llama.attention.head_count_kv",
        "llama.rope.dimension_count", "llama.vocab_size"})
    EXPECT_EQ(m.at(k, "").type, io::GgufType::U32) << k;
  EXPECT_TRUE(f.contains("output.weight"));  // untied
}

TEST_F(GgufModel, MixtralExportsMatchTheSafetensorsModel) {
  check_exports(tiny_mixtral(), dir_.string(), "mixtral");
  // llama.cpp's layout: the "llama" architecture with an expert count, one stacked tensor per
  // projection with GGUF dims [in, out, experts].
  io::GgufFile f = io::GgufFile::open(path("mixtral-f32.gguf"));
  EXPECT_EQ(f.metadata().at("general.architecture", "").as_string(""), "llama");
  EXPECT_EQ(gguf_int(f, "llama.expert_count"), 4);
  EXPECT_EQ(gguf_int(f, "llama.expert_used_count"), 2);
  EXPECT_EQ(f.info("blk.1.ffn_gate_inp.weight").dims, (std::vector<uint64_t>{32, 4}));
  EXPECT_EQ(f.info("blk.1.ffn_gate_exps.weight").dims, (std::vector<uint64_t>{32, 64, 4}));
  EXPECT_EQ(f.info("blk.1.ffn_up_exps.weight").dims, (std::vector<uint64_t>{32, 64, 4}));
  EXPECT_EQ(f.info("blk.1.ffn_down_exps.weight").dims, (std::vector<uint64_t>{64, 32, 4}));
  EXPECT_FALSE(f.contains("blk.0.ffn_gate.weight"));
  auto loaded = load_model_source(path("mixtral-f32.gguf"));
  EXPECT_EQ(loaded->model_config().family().name(), "mixtral");
  // Expert 2's down projection is the stack's third [32, 64] slice, as in the HF directory's
  // block_sparse_moe.experts.2.w2.weight.
  auto reference = load_model(path("hf"));
  const auto stack = [](CausalLM& m) {
    for (auto& [name, t] : m.state_dict())
      if (name == "layers.1.block_sparse_moe.experts.down_proj") return t;
    return Tensor();
  };
  const Tensor got = stack(*loaded), want = stack(*reference);
  ASSERT_TRUE(got.defined() && want.defined());
  EXPECT_EQ(max_abs_diff(got.narrow(0, 2, 1), want.narrow(0, 2, 1)), 0.0);
}

TEST_F(GgufModel, MixtralQ8_0ExportKeepsItsExpertStacksAsBlocks) {
  autograd::NoGradGuard no_grad;
  Generator gen(5);
  auto model = tiny_mixtral().build_random(gen);
  model->eval();
  save_gguf_model(*model, path("m-q8.gguf"), {"q8_0", "m", nullptr});
  io::GgufFile f = io::GgufFile::open(path("m-q8.gguf"));
  EXPECT_EQ(f.info("blk.0.ffn_up_exps.weight").type, io::ggml::kQ8_0);
  auto loaded = load_model_source(path("m-q8.gguf"));
  EXPECT_TRUE(is_quantized_model(*loaded));  // matrices and stacks stay Q8_0 blocks
  for (auto& [name, t] : loaded->state_dict())
    if (name.find(".experts.") != std::string::npos) EXPECT_EQ(t.dtype(), DType::I8) << name;
  // Widened, each stack is within Q8_0's rounding of the original (one scale per 32 values: half
  // a step of max/127), in the same layout.
  auto widened = load_model_source(path("m-q8.gguf"), GgufWeights::Dequantized);
  std::map<std::string, Tensor> before, after;
  for (auto& [name, t] : model->state_dict()) before[name] = t.to(DType::F32);
  for (auto& [name, t] : widened->state_dict()) after[name] = t.to(DType::F32);
  int stacks = 0;
  for (auto& [name, t] : before) {
    if (name.find(".experts.") == std::string::npos) continue;
    ++stacks;
    ASSERT_EQ(after[name].shape(), t.shape()) << name;
    EXPECT_LT(max_abs_diff(after[name], t), max_abs(t) / 127.0) << name;
  }
  EXPECT_EQ(stacks, 6);
  const Tensor ids = some_ids(53);
  const Tensor want = model->forward(ids), got = loaded->forward(ids);
  // Every matrix rounded to Q8_0 moves the logits (0.07 of their largest here: the weights of
  // initializer_range 0.3 make them sharp); the stacks above are the check of the layout.
  EXPECT_LT(max_abs_diff(got, want), 0.1 * max_abs(want));

  LlamaConfig windowed = tiny_mixtral();
  windowed.sliding_window = 5;
  auto with_window = windowed.build_random(gen);
  test::expect_error(
      [&] {
        save_gguf_model(*with_window, path("w.gguf"), {"f32", "", nullptr});
      },
      {"sliding_window 5"});
}

TEST_F(GgufModel, UnknownTypeIsAnErrorAndQ8_0MatricesLoad) {
  Generator gen(3);
  auto model = tiny_gpt2().build_random(gen);
  test::expect_error(
      [&] {
        save_gguf_model(*model, path("q.gguf"), {"q3", "", nullptr});
      },
      {"unknown --type 'q3'", "f16"});
  EXPECT_FALSE(fs::exists(path("q.gguf")));

  // A file whose matrix is stored as Q8_0 blocks (written by hand, all zero): it loads quantized.
  save_gguf_model(*model, path("f.gguf"), {"f32", "", nullptr});
  io::GgufFile f = io::GgufFile::open(path("f.gguf"));
  io::GgufMetadata m = f.metadata();
  std::vector<io::GgufTensorOut> tensors;
  for (const io::GgufTensorInfo& info : f.tensors()) {
    if (info.name == "blk.0.ffn_down.weight") {
      io::GgufTensorOut q;
      q.name = info.name;
      q.dims = info.dims;
      q.type = io::ggml::kQ8_0;
      q.bytes.assign(size_t(info.numel() / 32 * 34), 0);
      tensors.push_back(q);
    } else {
      tensors.push_back(io::GgufTensorOut::from_tensor(info.name, f.load(info.name)));
    }
  }
  io::save_gguf(path("q8.gguf"), m, tensors);
  auto loaded = load_model_source(path("q8.gguf"));
  EXPECT_TRUE(is_quantized_model(*loaded));
  EXPECT_EQ(dynamic_cast<GPT2&>(*loaded).blocks[0]->mlp->c_proj->quant_type(),
            kernels::quant::QuantType::Q8_0);
}

TEST_F(GgufModel, BadModelMetadataIsAClearError) {
  Generator gen(3);
  auto model = tiny_llama().build_random(gen);
  save_gguf_model(*model, path("l.gguf"), {"f32", "", nullptr});
  io::GgufFile f = io::GgufFile::open(path("l.gguf"));
  std::vector<io::GgufTensorOut> tensors;
  for (const io::GgufTensorInfo& info : f.tensors())
    tensors.push_back(io::GgufTensorOut::from_tensor(info.name, f.load(info.name)));
  io::GgufMetadata arch = f.metadata();
  arch.set("general.architecture", io::GgufValue::of_string("falcon"));
  io::save_gguf(path("arch.gguf"), arch, tensors);
  test::expect_error([&] { load_model_source(path("arch.gguf")); },
                     {"arch.gguf", "general.architecture 'falcon'", "gpt2, llama"});
  io::GgufMetadata heads;
  for (const auto& [k, v] : f.metadata().entries())
    if (k != "llama.block_count") heads.set(k, v);
  io::save_gguf(path("keys.gguf"), heads, tensors);
  test::expect_error([&] { load_model_source(path("keys.gguf")); },
                     {"keys.gguf", "'llama.block_count' is missing"});
  const std::string dropped = tensors[1].name;
  tensors.erase(tensors.begin() + 1);
  io::save_gguf(path("short.gguf"), f.metadata(), tensors);
  test::expect_error([&] { load_model_source(path("short.gguf")); },
                     {"short.gguf", "missing", dropped.c_str()});
}

}  // namespace
}  // namespace tessel::models
