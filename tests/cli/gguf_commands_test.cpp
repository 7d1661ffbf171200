// SPDX-License-Identifier: Apache-2.0
// GGUF through the program: `tessel quantize` writes a model directory (or a GGUF) as one .gguf
// with its tokenizer, and `generate`, `eval` and `tokenize` given that file alone behave exactly as
// with the directory (F32: identical ids and loss). Quantized types and damaged files are one
// clear error line. `--weights int8|bf16|f16` converts a directory's model at load in generate,
// eval (which prints the perplexity change against the model as stored) and serve.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"

namespace {

namespace fs = std::filesystem;
namespace cli_test = tessel::cli_test;
using cli_test::Outcome;

Outcome tessel(const std::string& args, const fs::path& dir) {
  return cli_test::run_tessel(args, dir);
}

nlohmann::json json_of(const Outcome& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out.empty() ? "{}" : r.out);
}

void expect_one_error_line(const Outcome& r, const std::string& part) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("tessel: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << "lacks '" << part << "': " << r.err;
}

// A GPT-2 of odd sizes (13 heads' worth of nothing: 3 heads of 7, 33 positions) with a byte-level
// vocabulary plus a few merges and <|endoftext|>, made by `tessel init`.
fs::path make_model(const fs::path& d, int n_embd = 21) {
  const fs::path src = d / "src";
  fs::create_directories(src);
  nlohmann::json vocab = nlohmann::json::object();
  int shifted = 0, id = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const int cp = printable ? b : 256 + shifted++;
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    vocab[s] = id++;
  }
  for (const char* merged : {"he", "ll", "hell", "\xC4\xA0w"}) vocab[merged] = id++;
  vocab["<|endoftext|>"] = id++;
  std::ofstream(src / "vocab.json") << vocab.dump();
  std::ofstream(src / "merges.txt") << "#version: 0.2\nh e\nl l\nhe ll\n\xC4\xA0 w\n";
  std::ofstream(src / "config.json") << R"({"model_type": "gpt2", "vocab_size": 261,
    "n_positions": 33, "n_embd": )" << n_embd
                                     << R"(, "n_layer": 2, "n_head": 3,
    "initializer_range": 0.2, "bos_token_id": 260, "eos_token_id": 260,
    "activation_function": "gelu_new"})";
  const fs::path model = d / "model";
  const Outcome r = tessel("init --config " + (src / "config.json").string() + " --out " +
                               model.string() + " -s 7 --force",
                           d);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return model;
}

TEST(QuantizeCommand, GgufAloneGeneratesEvaluatesAndTokenizesAsTheDirectory) {
  const fs::path d = cli_test::scratch("tessel_cli_gguf_", "same");
  const fs::path model = make_model(d);
  const std::string gguf = (d / "model-f32.gguf").string();
  const Outcome q = tessel("quantize -m " + model.string() + " --type f32 -o " + gguf, d);
  const nlohmann::json summary = json_of(q);
  EXPECT_EQ(summary["type"], "f32");
  EXPECT_EQ(summary["tokenizer"], true);
  EXPECT_EQ(summary["max_rel_rms_error"], 0.0);
  EXPECT_NE(q.err.find("[1/"), std::string::npos) << q.err;
  EXPECT_NE(q.err.find("blk.1.ffn_down.weight"), std::string::npos) << q.err;

  const std::string gen = " -p 'hello world' -n 16 --temp 0 --ignore-eos --format json";
  const nlohmann::json want = json_of(tessel("generate -m " + model.string() + gen, d));
  const nlohmann::json got = json_of(tessel("generate -m " + gguf + gen, d));
  EXPECT_EQ(got["prompt_ids"], want["prompt_ids"]);
  EXPECT_EQ(got["generated_ids"], want["generated_ids"]);
  EXPECT_EQ(got["text"], want["text"]);

  std::ofstream(d / "text.txt") << "hello world, well well: hell is the held shell.\n";
  const std::string ev = " --text " + (d / "text.txt").string() + " -c 16";
  const nlohmann::json e_want = json_of(tessel("eval -m " + model.string() + ev, d));
  const nlohmann::json e_got = json_of(tessel("eval -m " + gguf + ev, d));
  EXPECT_EQ(e_got["tokens"], e_want["tokens"]);
  EXPECT_EQ(e_got["mean_cross_entropy"], e_want["mean_cross_entropy"]);

  const std::string tok = " --text 'hello <|endoftext|> well' --special";
  const Outcome t_want = tessel("tokenize -m " + model.string() + tok, d);
  const Outcome t_got = tessel("tokenize -m " + gguf + tok, d);
  EXPECT_EQ(t_got.exit_code, 0) << t_got.err;
  EXPECT_EQ(t_got.out, t_want.out);

  // GGUF -> GGUF at f16: smaller, loads, generates.
  const std::string f16 = (d / "model-f16.gguf").string();
  const nlohmann::json s16 = json_of(tessel("quantize -q -m " + gguf + " --type f16 -o " + f16, d));
  EXPECT_LT(s16["bytes"].get<int64_t>(), summary["bytes"].get<int64_t>());
  EXPECT_GT(s16["max_rel_rms_error"].get<double>(), 0.0);
  EXPECT_LT(s16["max_rel_rms_error"].get<double>(), 1e-3);
  const nlohmann::json g16 = json_of(tessel("generate -m " + f16 + gen, d));
  EXPECT_EQ(g16["generated_ids"].size(), 16u);
}

TEST(QuantizeCommand, LlamaGgufGeneratesTheDirectorysIds) {
  // GQA 4/2 heads of 6: the q/k rows go through the interleaved-RoPE permutation and back.
  const fs::path d = cli_test::scratch("tessel_cli_gguf_", "llama");
  std::ofstream(d / "config.json") << R"({"architectures": ["LlamaForCausalLM"],
    "model_type": "llama", "vocab_size": 61, "hidden_size": 24, "intermediate_size": 36,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "initializer_range": 0.3, "rms_norm_eps": 1e-5})";
  const fs::path model = d / "model";
  ASSERT_EQ(
      tessel("init --config " + (d / "config.json").string() + " --out " + model.string() + " -s 3",
             d)
          .exit_code,
      0);
  const std::string gguf = (d / "llama.gguf").string();
  const Outcome q = tessel("quantize -q -m " + model.string() + " --type f32 -o " + gguf, d);
  EXPECT_EQ(json_of(q)["tokenizer"], false);
  EXPECT_NE(q.err.find("no tokenizer"), std::string::npos) << q.err;
  const std::string gen = " --prompt-ids 1,2,3 -n 24 --temp 0 --ignore-eos --format json";
  const nlohmann::json want = json_of(tessel("generate -m " + model.string() + gen, d));
  const nlohmann::json got = json_of(tessel("generate -m " + gguf + gen, d));
  EXPECT_EQ(got["generated_ids"], want["generated_ids"]);
  // Without a tokenizer in the file, a text prompt is refused as it is for a directory.
  expect_one_error_line(tessel("generate -m " + gguf + " -p hi -n 2", d), "needs a tokenizer");
}

// Rows of 96 (3 heads of 32): Q8_0 quantizes every matrix; Q4_K_M's 256-blocks do not fit, so
// its matrices stay F16 with a note. Both generate and evaluate from the file alone.
TEST(QuantizeCommand, QuantizedGgufGeneratesAndEvaluates) {
  const fs::path d = cli_test::scratch("tessel_cli_gguf_", "quantized");
  const fs::path model = make_model(d, 96);
  std::ofstream(d / "text.txt") << "hello world, well well: hell is the held shell.\n";
  const std::string ev = " --text " + (d / "text.txt").string() + " -c 16";
  const double f32_loss =
      json_of(tessel("eval -m " + model.string() + ev, d))["mean_cross_entropy"];
  for (const std::string type : {"q8_0", "q4_k_m"}) {
    const std::string gguf = (d / ("model-" + type + ".gguf")).string();
    const Outcome q =
        tessel("quantize -m " + model.string() + " --type " + type + " -o " + gguf, d);
    EXPECT_EQ(json_of(q)["type"], type);
    if (type == "q8_0") {
      EXPECT_NE(q.err.find("Q8_0"), std::string::npos) << q.err;
    } else {
      EXPECT_NE(q.err.find("kept as F16"), std::string::npos) << q.err;
    }
    const nlohmann::json g = json_of(tessel(
        "generate -m " + gguf + " -p 'hello world' -n 8 --temp 0 --ignore-eos --format json", d));
    EXPECT_EQ(g["generated_ids"].size(), 8u);
    const double loss = json_of(tessel("eval -m " + gguf + ev, d))["mean_cross_entropy"];
    EXPECT_NEAR(loss, f32_loss, 0.01 * f32_loss) << type;
  }
}

// Rows of 96: the int8 kernel's activation blocks cover them (its tail path is in the op cases).
TEST(WeightsFlag, GenerateEvalAndServeConvertTheMatrices) {
  const fs::path d = cli_test::scratch("tessel_cli_gguf_", "weights");
  const fs::path model = make_model(d, 96);
  const std::string gen = " -p 'hello world' -n 8 --temp 0 --ignore-eos --format json";
  std::ofstream(d / "text.txt") << "hello world, well well: hell is the held shell.\n";
  const std::string ev = " --text " + (d / "text.txt").string() + " -c 16";
  const nlohmann::json f32 = json_of(tessel("eval -m " + model.string() + ev, d));
  EXPECT_EQ(f32["weights"], "stored");
  EXPECT_FALSE(f32.contains("reference_perplexity"));
  for (const std::string weights : {"int8", "bf16", "f16"}) {
    const Outcome g = tessel("generate -m " + model.string() + gen + " --weights " + weights, d);
    const nlohmann::json out = json_of(g);
    EXPECT_EQ(out["weights"], weights);
    EXPECT_EQ(out["generated_ids"].size(), 8u);
    // 2 blocks x 4 Linear and the tied embedding table (the position table is an Embedding too).
    EXPECT_NE(g.err.find("--weights " + weights + ": 10 matrices converted"), std::string::npos)
        << g.err;
    const Outcome e = tessel("eval -m " + model.string() + ev + " --weights " + weights, d);
    const nlohmann::json j = json_of(e);
    EXPECT_EQ(j["weights"], weights);
    EXPECT_EQ(j["reference_weights"], "f32");
    EXPECT_EQ(j["reference_mean_cross_entropy"], f32["mean_cross_entropy"]);
    EXPECT_DOUBLE_EQ(j["perplexity_change"].get<double>(),
                     j["perplexity"].get<double>() - j["reference_perplexity"].get<double>());
    // Measured on this random model (perplexity ~2371): int8 -0.95 %, bf16 -0.006 %, f16 +0.024 %.
    EXPECT_LT(std::abs(j["perplexity_change_pct"].get<double>()), weights == "int8" ? 3.0 : 0.2)
        << weights;
    EXPECT_NE(e.err.find("with " + weights + " weights"), std::string::npos) << e.err;
  }
  expect_one_error_line(tessel("generate -m " + model.string() + gen + " --weights int4", d),
                        "--weights 'int4'");
  expect_one_error_line(tessel("eval -m " + model.string() + ev + " --weights fp8", d),
                        "--weights 'fp8'");
  // serve: converts before it reports ready, then drains on SIGTERM.
  const std::string serve =
      std::string(TESSEL_BINARY) + " serve -m " + model.string() + " --port 0 --weights int8";
  const std::string script =
      serve + " >" + (d / "serve.out").string() + " 2>" + (d / "serve.err").string() +
      " & pid=$!; for i in $(seq 300); do grep -q ready " + (d / "serve.out").string() +
      " && break; sleep 0.1; done; kill -TERM $pid; wait $pid";
  EXPECT_EQ(std::system(("bash -c '" + script + "'").c_str()), 0);
  EXPECT_NE(cli_test::slurp(d / "serve.out").find("ready"), std::string::npos);
  const std::string err = cli_test::slurp(d / "serve.err");
  EXPECT_NE(err.find("serve: --weights int8: 10 matrices converted"), std::string::npos) << err;
  expect_one_error_line(tessel("serve -m " + model.string() + " --port 0 --weights int4", d),
                        "--weights 'int4'");
}

TEST(QuantizeCommand, UnknownTypesAndBadFilesAreOneErrorLine) {
  const fs::path d = cli_test::scratch("tessel_cli_gguf_", "errors");
  const fs::path model = make_model(d);
  const std::string out = (d / "q.gguf").string();
  expect_one_error_line(tessel("quantize -m " + model.string() + " --type f8 -o " + out, d),
                        "unknown --type 'f8'");
  EXPECT_FALSE(fs::exists(out));

  // A GGUF cut short: generate names the file and what was truncated.
  const std::string good = (d / "good.gguf").string();
  ASSERT_EQ(tessel("quantize -q -m " + model.string() + " -o " + good, d).exit_code, 0);
  std::string bytes = cli_test::slurp(good);
  const std::string cut = (d / "cut.gguf").string();
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  expect_one_error_line(tessel("generate -m " + cut + " --prompt-ids 1,2 -n 2 --format json", d),
                        "cut.gguf");
}

}  // namespace
