// SPDX-License-Identifier: Apache-2.0
// `tessel init`, `tokenize`, `generate` and `eval` run as programs on a tiny GPT-2 that `init`
// writes: results equal the library's (greedy ids, per-window cross-entropy), seeds replay, and
// every bad invocation exits non-zero with one `tessel: error:` line and nothing on stdout.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_run.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/core/thread_pool.h"
#include "tessel/models/gpt2/gpt2_checkpoint.h"

namespace {

namespace fs = std::filesystem;
namespace cli_test = tessel::cli_test;

using cli_test::Outcome;
using cli_test::slurp;

fs::path scratch(const std::string& name) {
  return cli_test::scratch("tessel_cli_model_", name);
}

Outcome tessel(const std::string& args, const fs::path& dir) {
  return cli_test::run_tessel(args, dir);
}

void expect_one_error_line(const Outcome& r, const std::string& part) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("tessel: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << "lacks '" << part << "': " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// A byte-level vocabulary (no merges; byte b has id b) with <|endoftext|> = 256.
void write_tokenizer(const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    // GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest move to U+0100+.
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const int cp = printable ? b : 256 + shifted++;
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    vocab[s] = b;
  }
  vocab["<|endoftext|>"] = 256;
  std::ofstream(dir / "vocab.json") << vocab.dump();
  std::ofstream(dir / "merges.txt") << "#version: 0.2\n";
}

// Odd sizes: 257 tokens, 33 positions, 3 heads of 7.
void write_config(const fs::path& dir) {
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt2", "vocab_size": 257,
    "n_positions": 33, "n_embd": 21, "n_layer": 2, "n_head": 3, "initializer_range": 0.2,
    "bos_token_id": 256, "eos_token_id": 256, "activation_function": "gelu_new"})";
}

// init from a config directory that has tokenizer files (or not); returns the model directory.
fs::path init_model(const fs::path& d, bool with_tokenizer = true, int seed = 3) {
  const fs::path src = d / (with_tokenizer ? "src" : "src_bare");
  fs::create_directories(src);
  write_config(src);
  if (with_tokenizer) write_tokenizer(src);
  const fs::path model = d / (with_tokenizer ? "model" : "model_bare");
  const Outcome r = tessel("init --config " + (src / "config.json").string() + " --out " +
                               model.string() + " -s " + std::to_string(seed) + " --force",
                           d);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return model;
}

nlohmann::json json_of(const Outcome& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(InitCommand, WritesALoadableModelWithItsTokenizer) {
  const fs::path d = scratch("init");
  const fs::path model = init_model(d);
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"}) {
    EXPECT_TRUE(fs::exists(model / f)) << f;
  }
  auto gpt2 = tessel::models::load_gpt2(model.string());
  EXPECT_EQ(gpt2->config().n_embd, 21);
  EXPECT_EQ(gpt2->config().vocab_size, 257);
  // GPT-2 init: residual projections have a smaller spread than c_fc.
  auto spread = [](const tessel::Tensor& t) {
    double s = 0;
    for (double x : t.to_vector<double>()) s += x * x;
    return std::sqrt(s / double(t.numel()));
  };
  // Statistical: c_fc holds 21 x 84 = 1764 normal draws, whose sample standard deviation has a
  // relative standard error of 1/sqrt(2N) = 1.7%: 10% is six standard errors.
  EXPECT_NEAR(spread(gpt2->blocks[0]->mlp->c_fc->weight), 0.2, 0.02);
  EXPECT_NEAR(spread(gpt2->blocks[0]->mlp->c_proj->weight), 0.1, 0.01);

  // Same seed, same bytes; another seed, other weights.
  const std::string first = slurp(model / "model.safetensors");
  init_model(d, true, 3);
  EXPECT_EQ(slurp(model / "model.safetensors"), first);
  init_model(d, true, 4);
  EXPECT_NE(slurp(model / "model.safetensors"), first);

  const std::string cfg = (d / "src" / "config.json").string();
  expect_one_error_line(tessel("init --config " + cfg + " --out " + model.string(), d),
                        "already holds a model");
  expect_one_error_line(
      tessel("init --config " + (d / "nope.json").string() + " --out " + (d / "other").string(), d),
      "nope.json not found");
  std::ofstream(d / "bad.json") << R"({"vocab_size": 10, "n_embd": 20, "n_head": 3})";
  expect_one_error_line(
      tessel("init --config " + (d / "bad.json").string() + " --out " + (d / "other").string(), d),
      "n_head");
  expect_one_error_line(tessel("init --out " + (d / "other").string(), d), "--config");
  // A tokenizer larger than the model's vocabulary is refused.
  fs::create_directories(d / "small");
  std::ofstream(d / "small" / "config.json") << R"({"vocab_size": 100, "n_positions": 8,
    "n_embd": 8, "n_layer": 1, "n_head": 2})";
  write_tokenizer(d / "small");
  expect_one_error_line(tessel("init --config " + (d / "small" / "config.json").string() +
                                   " --out " + (d / "other").string(),
                               d),
                        "257 tokens, more than vocab_size 100");
  EXPECT_FALSE(fs::exists(d / "other"));
}

TEST(TokenizeCommand, EncodesAndDecodes) {
  const fs::path d = scratch("tokenize");
  const fs::path model = init_model(d);
  EXPECT_EQ(json_of(tessel("tokenize -m " + model.string() + " --text 'hello <|endoftext|>'", d)),
            nlohmann::json({104, 101, 108, 108, 111, 32, 60, 124, 101, 110, 100, 111, 102, 116, 101,
                            120, 116, 124, 62}));
  EXPECT_EQ(
      json_of(tessel("tokenize -m " + model.string() + " --special --text 'hi<|endoftext|>'", d)),
      nlohmann::json({104, 105, 256}));
  std::ofstream(d / "in.txt") << "a\nb";
  EXPECT_EQ(
      json_of(tessel("tokenize -m " + model.string() + " --file " + (d / "in.txt").string(), d)),
      nlohmann::json({97, 10, 98}));
  const Outcome dec = tessel("tokenize -m " + model.string() + " --decode 104,105,33", d);
  EXPECT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_EQ(dec.out, "hi!\n");

  const std::string m = "tokenize -m " + model.string();
  expect_one_error_line(tessel(m + " --decode 1,257", d), "id 257 is out of range [0, 257)");
  expect_one_error_line(tessel(m + " --decode 1,x", d), "'x' is not a token id");
  expect_one_error_line(tessel(m, d), "exactly one of --text, --file or --decode");
  expect_one_error_line(tessel(m + " --text a --decode 1", d), "exactly one of");
  expect_one_error_line(tessel(m + " --file " + (d / "absent.txt").string(), d), "absent.txt");
  expect_one_error_line(tessel("tokenize -m " + (d / "nope").string() + " --text a", d), "nope");
  const fs::path bare = init_model(d, false);
  expect_one_error_line(tessel("tokenize -m " + bare.string() + " --text a", d), "no tokenizer in");
}

TEST(GenerateCommand, GreedyJsonEqualsTheLibrary) {
  const fs::path d = scratch("generate");
  const fs::path model = init_model(d);
  const nlohmann::json j = json_of(tessel(
      "generate -m " + model.string() + " -p 'Hello' -n 20 --temp 0 --ignore-eos --format json",
      d));
  const std::vector<int64_t> prompt = {72, 101, 108, 108, 111};
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int64_t>>(), prompt);
  EXPECT_EQ(j["prompt"], "Hello");
  auto gpt2 = tessel::models::load_gpt2(model.string());
  const std::vector<int64_t> want = gpt2->generate_greedy(prompt, 20);
  EXPECT_EQ(j["generated_ids"].get<std::vector<int64_t>>(), want);
  std::string text;
  for (int64_t id : want)
    text += id == 256 ? std::string("<|endoftext|>") : std::string(1, char(id));
  if (std::all_of(text.begin(), text.end(), [](char c) { return (unsigned char)c < 0x80; })) {
    EXPECT_EQ(j["text"], text);
  }
  EXPECT_EQ(j["generated_tokens"], 20);
  EXPECT_GT(j["prompt_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["generation_tokens_per_s"].get<double>(), 0);

  // The same through --prompt-ids, and top-k 1 is greedy too.
  const nlohmann::json by_ids =
      json_of(tessel("generate -m " + model.string() +
                         " --prompt-ids 72,101,108,108,111 -n 20 --top-k 1 --temp 1.5 "
                         "--ignore-eos --format json",
                     d));
  EXPECT_EQ(by_ids["generated_ids"], j["generated_ids"]);

  // Text output streams the prompt and the generated text.
  const Outcome t = tessel("generate -m " + model.string() + " -p 'Hello' -n 5 --temp 0", d);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out.rfind("Hello", 0), 0u) << t.out;
  EXPECT_NE(t.err.find("tokens/s"), std::string::npos) << t.err;
}

TEST(GenerateCommand, SeedsReplayAndStopAtEos) {
  const fs::path d = scratch("generate_seed");
  const fs::path model = init_model(d);
  auto run = [&](int seed, const std::string& more = "") {
    return json_of(tessel("generate -m " + model.string() + " --prompt-ids 1,2,3 -n 25 -s " +
                              std::to_string(seed) + " --temp 1 --top-k 0 --top-p 1 " + more +
                              " --format json",
                          d));
  };
  const auto a = run(7, "--ignore-eos"), b = run(7, "--ignore-eos"), c = run(8, "--ignore-eos");
  EXPECT_EQ(a["generated_ids"], b["generated_ids"]);
  EXPECT_NE(a["generated_ids"], c["generated_ids"]);
  EXPECT_EQ(a["generated_ids"].size(), 25u);
  // Without --ignore-eos the output ends at the first <|endoftext|> (256), if one is drawn.
  const auto ids = a["generated_ids"].get<std::vector<int64_t>>();
  const auto stop = run(7);
  const auto eos = std::find(ids.begin(), ids.end(), 256);
  const std::vector<int64_t> want(ids.begin(), eos == ids.end() ? eos : eos + 1);
  EXPECT_EQ(stop["generated_ids"].get<std::vector<int64_t>>(), want);
  EXPECT_EQ(stop["stopped_at_eos"], eos != ids.end());
}

TEST(GenerateCommand, BadInvocationsFailBeforeAnyWork) {
  const fs::path d = scratch("generate_errors");
  const fs::path model = init_model(d);
  const std::string g = "generate -m " + model.string();
  expect_one_error_line(tessel(g + " --prompt-ids 1,2,3 -n 31", d),
                        "prompt of 3 tokens + -n 31 = 34 tokens exceeds the context length "
                        "max_positions = 33");
  expect_one_error_line(tessel(g + " -p 'Hello' --prompt-ids 1", d), "exactly one of");
  expect_one_error_line(tessel(g + " -n 3", d), "exactly one of");
  expect_one_error_line(tessel(g + " --prompt-ids 1,,2", d), "'' is not a token id");
  expect_one_error_line(tessel(g + " --prompt-ids 1,300", d), "prompt id 300 is out of range");
  expect_one_error_line(tessel(g + " -p a --format xml", d), "--format 'xml'");
  expect_one_error_line(tessel(g + " -p a --top-p 0", d), "top-p 0");
  expect_one_error_line(tessel(g + " -p a --temp -1", d), "temperature -1");
  expect_one_error_line(tessel(g + " -p a --temp abc", d), "--temp");
  expect_one_error_line(tessel(g + " -p a -n -2", d), "-n -2");
  expect_one_error_line(tessel("generate -m " + (d / "nope").string() + " -p a", d), "nope");
  fs::create_directories(d / "empty");
  expect_one_error_line(tessel("generate -m " + (d / "empty").string() + " -p a", d),
                        "config.json not found");
  // A model without tokenizer files: ids in, JSON out only.
  const fs::path bare = init_model(d, false);
  const std::string gb = "generate -m " + bare.string();
  expect_one_error_line(tessel(gb + " -p a", d), "-p needs a tokenizer");
  expect_one_error_line(tessel(gb + " --prompt-ids 1,2", d), "text output needs a tokenizer");
  const nlohmann::json j =
      json_of(tessel(gb + " --prompt-ids 1,2 -n 4 --ignore-eos --format json", d));
  EXPECT_EQ(j["generated_ids"].size(), 4u);
  EXPECT_TRUE(j["text"].is_null());
  // Weights that do not match the config: one error naming the tensors.
  fs::copy_file(bare / "model.safetensors", model / "model.safetensors",
                fs::copy_options::overwrite_existing);
  std::ofstream(model / "config.json") << R"({"vocab_size": 257, "n_positions": 33,
    "n_embd": 42, "n_layer": 2, "n_head": 3})";
  const Outcome mis_shaped = tessel(g + " -p a -n 1", d);
  expect_one_error_line(mis_shaped, "mis-shaped: wte.weight (expected [257, 42], got [257, ");
  // The first few tensors name the problem; the rest are counted, not listed.
  EXPECT_NE(mis_shaped.err.find(" more; "), std::string::npos) << mis_shaped.err;
  EXPECT_LT(mis_shaped.err.size(), 400u) << mis_shaped.err;
}

TEST(EvalCommand, MatchesPerWindowCrossEntropy) {
  const fs::path d = scratch("eval");
  const fs::path model = init_model(d);
  // 80 bytes = 80 tokens: windows of 33, 33 and 13 predicted tokens.
  std::string text;
  for (int i = 0; text.size() < 80; ++i) text += char('a' + (i * 7) % 26);
  std::ofstream(d / "text.txt") << text;
  const nlohmann::json j =
      json_of(tessel("eval -m " + model.string() + " --text " + (d / "text.txt").string(), d));
  EXPECT_EQ(j["tokens"], 80);
  EXPECT_EQ(j["predicted_tokens"], 79);
  EXPECT_EQ(j["windows"], 3);
  EXPECT_EQ(j["context"], 33);

  auto gpt2 = tessel::models::load_gpt2(model.string());
  tessel::autograd::NoGradGuard no_grad;
  double total = 0;
  for (int64_t s : {0, 33, 66}) {
    const int64_t len = std::min<int64_t>(33, 79 - s);
    std::vector<int64_t> ids, targets;
    for (int64_t i = 0; i < len; ++i) {
      ids.push_back((unsigned char)text[size_t(s + i)]);
      targets.push_back((unsigned char)text[size_t(s + i + 1)]);
    }
    total += gpt2->loss(tessel::from_data(ids, tessel::Shape{1, len}),
                        tessel::from_data(targets, tessel::Shape{1, len}))
                 .item() *
             double(len);
  }
  const double mean = total / 79;
  // The reference scores each window with the library and averages in f64; eval may batch and
  // block the same f32 sums (GEMMs, softmax over 257 classes) differently: relative differences
  // of order 8 u sqrt(257) = 8e-6 at most (tests/common/tolerance.h); a window scored twice or
  // dropped moves the mean by 1e-2.
  EXPECT_NEAR(j["mean_cross_entropy"].get<double>(), mean, 1e-5 * mean);
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(mean), 1e-5 * std::exp(mean));
  // A random model is near uniform over 257 tokens, far from a trained one.
  EXPECT_GT(mean, 3.0);

  const nlohmann::json short_windows =
      json_of(tessel("eval -m " + model.string() + " -c 7 --text " + (d / "text.txt").string(), d));
  EXPECT_EQ(short_windows["windows"], 12);  // ceil(79 / 7)

  std::ofstream(d / "one.txt") << "a";
  expect_one_error_line(
      tessel("eval -m " + model.string() + " --text " + (d / "one.txt").string(), d),
      "at least 2 are needed");
  expect_one_error_line(
      tessel("eval -m " + model.string() + " --text " + (d / "absent.txt").string(), d),
      "absent.txt");
  expect_one_error_line(
      tessel("eval -m " + model.string() + " -c 34 --text " + (d / "text.txt").string(), d),
      "--context 34 exceeds max_positions = 33");
  expect_one_error_line(
      tessel("eval -m " + model.string() + " -c -3 --text " + (d / "text.txt").string(), d),
      "--context must be >= 0 (0: the model's n_positions), got -3");
  // A binary file is refused as `data prepare` refuses it, naming the first NUL byte.
  std::ofstream(d / "binary.dat", std::ios::binary) << std::string("ab\0cd", 5);
  expect_one_error_line(
      tessel("eval -m " + model.string() + " --text " + (d / "binary.dat").string(), d),
      "binary.dat is not text (it holds a NUL byte at offset 2)");
  expect_one_error_line(tessel("eval -m " + model.string(), d), "--text");
  const fs::path bare = init_model(d, false);
  expect_one_error_line(
      tessel("eval -m " + bare.string() + " --text " + (d / "text.txt").string(), d),
      "no tokenizer in");
}

// `bench generate --profile` splits a decode step's time by kernel: every figure is there, the
// products of a decode step appear as one-row GEMMs (the small-m path), the total is the sum of
// the rows, the floor's fraction is over the probe taken beside the run, and a LLaMA config is
// measured like a GPT-2 one.
TEST(BenchGenerate, ProfileSplitsTheDecodeByKernel) {
  const fs::path d = scratch("bench_generate");
  std::ofstream(d / "gpt2.json") << R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "vocab_size": 97, "n_positions": 33, "n_embd": 16, "n_layer": 2, "n_head": 2})";
  std::ofstream(d / "llama.json") << R"({"architectures": ["LlamaForCausalLM"],
    "model_type": "llama", "vocab_size": 101, "hidden_size": 16, "intermediate_size": 24,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 33, "tie_word_embeddings": false})";
  for (const char* name : {"gpt2.json", "llama.json"}) {
    const Outcome r = tessel("bench generate --config " + (d / name).string() +
                                 " --prompt 7 --tokens 13 --seconds 0 --profile",
                             d);
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    std::map<std::string, int> figures;
    double share = 0, kernel_ms = 0, total_ms = 0, kernels_total_ms = 0;
    bool one_row_gemm = false;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("bench", "") != "generate") continue;
      const std::string figure = j["figure"];
      ++figures[figure];
      if (figure == "decode_profile") {
        share += j["share"].get<double>();
        kernel_ms += j["ms_per_token"].get<double>();
        EXPECT_GT(j["calls_per_token"].get<double>(), 0) << line;
        one_row_gemm |= j["kernel"].get<std::string>().rfind("gemm.NT 1x", 0) == 0;
      } else if (figure == "decode_profile_total") {
        total_ms = j["ms_per_token"];
        kernels_total_ms = j["kernels_ms_per_token"];
      } else if (figure == "decode_bandwidth") {
        // One timed run (--seconds 0), one probe right after it: the fraction is that run's
        // rate over that probe's, not over the start-up probe's.
        EXPECT_EQ(j["probes"].get<int>(), 1) << line;
        EXPECT_GT(j["read_bandwidth_gbs"].get<double>(), 0) << line;
        EXPECT_GT(j["read_bandwidth_gbs_at_start"].get<double>(), 0) << line;
        EXPECT_DOUBLE_EQ(j["fraction_of_read_bandwidth"].get<double>(),
                         j["gbs"].get<double>() / j["read_bandwidth_gbs"].get<double>())
            << line;
      }
    }
    EXPECT_EQ(figures["prefill"], 1) << r.out;
    EXPECT_EQ(figures["decode"], 1) << r.out;
    EXPECT_EQ(figures["decode_bandwidth"], 1) << r.out;
    EXPECT_EQ(figures["decode_profile_total"], 1) << r.out;
    EXPECT_GE(figures["decode_profile"], 4) << r.out;  // gemm, attention, norms, elementwise
    EXPECT_TRUE(one_row_gemm) << name << ": no one-row product in the decode's profile\n" << r.out;
    // The total is the sum of the rows (no timing is asserted: only that the figures agree).
    EXPECT_GT(total_ms, 0);
    EXPECT_NEAR(kernel_ms, kernels_total_ms, 1e-9 + 1e-9 * kernels_total_ms) << r.out;
    EXPECT_TRUE(std::isfinite(share)) << r.out;
  }
}

// Decoding commands poll between regions unless TESSEL_POOL_SPIN_US says otherwise (thread_pool.h):
// the decode figure names the setting the run used.
TEST(BenchGenerate, DecodingPollsUnlessTheEnvironmentSaysOtherwise) {
  const fs::path d = scratch("bench_generate_pool");
  std::ofstream(d / "gpt2.json") << R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "vocab_size": 97, "n_positions": 33, "n_embd": 16, "n_layer": 2, "n_head": 2})";
  const char* saved = std::getenv("TESSEL_POOL_SPIN_US");
  const std::string restore = saved ? saved : "";
  for (const auto& [env, want] : std::vector<std::pair<std::string, int64_t>>{
           {"", tessel::detail::kDecodeSpinUs}, {"off", -1}, {"0", 0}, {"7", 7}}) {
    if (env.empty())
      unsetenv("TESSEL_POOL_SPIN_US");
    else
      setenv("TESSEL_POOL_SPIN_US", env.c_str(), 1);
    const Outcome r = tessel("bench generate --config " + (d / "gpt2.json").string() +
                                 " --prompt 3 --tokens 5 --seconds 0",
                             d);
    ASSERT_EQ(r.exit_code, 0) << env << ": " << r.err;
    int64_t seen = -100;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("figure", "") == "decode") seen = j["pool_spin_us"].get<int64_t>();
    }
    EXPECT_EQ(seen, want) << "TESSEL_POOL_SPIN_US='" << env << "'\n" << r.out;
  }
  setenv("TESSEL_POOL_SPIN_US", "often", 1);
  expect_one_error_line(tessel("bench generate --config " + (d / "gpt2.json").string() +
                                   " --prompt 3 --tokens 5 --seconds 0",
                               d),
                        "TESSEL_POOL_SPIN_US must be 'off' or an integer");
  if (saved)
    setenv("TESSEL_POOL_SPIN_US", restore.c_str(), 1);
  else
    unsetenv("TESSEL_POOL_SPIN_US");
}

// A Mixtral's decode reads the active weights: every tensor but the experts', and k / E of each
// layer's expert stacks, which is what the floor divides by; the profile (with the grouped GEMM's
// rows) renders as JSON.
TEST(BenchGenerate, MixtralTrafficCountsTheActiveExperts) {
  const fs::path d = scratch("bench_generate_moe");
  std::ofstream(d / "mixtral.json") << R"({"architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral", "vocab_size": 101, "hidden_size": 16, "intermediate_size": 24,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 33, "tie_word_embeddings": false, "num_local_experts": 5,
    "num_experts_per_tok": 2})";
  const Outcome r = tessel("bench generate --config " + (d / "mixtral.json").string() +
                               " --prompt 7 --tokens 5 --seconds 0 --profile",
                           d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  bool grouped = false, bandwidth = false;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("figure", "") == "decode_profile")
      grouped |= j["kernel"].get<std::string>() == "grouped_gemm.rows";
    if (j.value("figure", "") != "decode_bandwidth") continue;
    bandwidth = true;
    // 3 layers x 3 stacks of 5 experts x 16 x 24 f32; 3 of the 5 experts idle per token.
    const double idle = 3.0 * 3 * 5 * 16 * 24 * 4 * 3 / 5;
    EXPECT_DOUBLE_EQ(j["stored_weight_bytes"].get<double>() - j["weight_bytes"].get<double>(), idle)
        << line;
  }
  EXPECT_TRUE(bandwidth) << r.out;
  EXPECT_TRUE(grouped) << r.out;
}

}  // namespace
