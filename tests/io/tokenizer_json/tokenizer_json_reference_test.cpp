// SPDX-License-Identifier: Apache-2.0
// tokenizer.json files against Hugging Face's own JavaScript implementation of the format (npm
// @huggingface/tokenizers; see tests/io/tokenizer_json_fixture.sh): a byte-level file with Llama
// 3's pre-tokenizer regex over GPT-2's vocabulary, and the SentencePiece-style files (Llama 2
// layout BPE with byte fallback, Unigram) converted by the SentencePiece fixture. Ids must be
// equal (special tokens recognised, as Hugging Face does by default), and so must decoded text.
// GGUF byte-level tokenizers with each tokenizer.ggml.pre name tessel reads are held to the same
// reference over tokenizer.json files with that name's regex and merge rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessel/io/gguf.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string configured(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

const json& recorded() {
  static const json j = [] {
    const fs::path path =
        fs::path(configured("TESSEL_TOKENIZER_JSON_DIR", TESSEL_TOKENIZER_JSON_DIR)) /
        "expected.json";
    if (!fs::exists(path)) return json();
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return json::parse(s.str());
  }();
  return j;
}

std::string show(const std::vector<int32_t>& ids) {
  return json(ids).dump();
}

// skip(ids) leaves out a case by the reference's ids; `least` cases must be compared.
void expect_matches(const Tokenizer& tok, const json& cases, bool check_text, size_t least,
                    const std::function<bool(const std::vector<int32_t>&)>& skip = {}) {
  size_t wrong = 0, checked = 0;
  for (const json& c : cases) {
    const std::string text = c.at("text");
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    if (skip && skip(want)) continue;
    ++checked;
    const std::vector<int32_t> ids = tok.encode(text, /*allow_special=*/true);
    bool text_ok = true;
    if (check_text) {
      std::string decoded = tok.decode(want);
      // The reference decodes with JavaScript's TextDecoder, which drops a leading U+FEFF.
      if (decoded.starts_with("\xEF\xBB\xBF")) decoded.erase(0, 3);
      text_ok = decoded == c.at("decoded").get<std::string>();
    }
    if (ids == want && text_ok) continue;
    if (++wrong <= 5) {
      ADD_FAILURE() << json(text).dump() << "\n  tessel:    " << show(ids)
                    << "\n  reference: " << show(want)
                    << "\n  decoded:   " << json(tok.decode(want)).dump()
                    << "\n  expected:  " << (check_text ? c.at("decoded").dump() : "");
    }
  }
  EXPECT_EQ(wrong, 0u) << "of " << checked;
  EXPECT_GE(checked, least);
}

#define REQUIRE_RECORDED()                                                \
  ASSERT_FALSE(recorded().is_null())                                      \
      << "no recorded ids: run these tests through ctest, whose fixture " \
         "io.tokenizer_json_setup records them"

TEST(TokenizerJsonReference, Llama3RegexByteLevel) {
  REQUIRE_RECORDED();
  const fs::path dir = configured("TESSEL_TOKENIZER_JSON_DIR", TESSEL_TOKENIZER_JSON_DIR);
  const Tokenizer tok = Tokenizer::load((dir / "llama3_regex").string());
  expect_matches(tok, recorded().at("models").at("llama3_regex"), false, 2500);
}

TEST(TokenizerJsonReference, Llama2LayoutBpe) {
  REQUIRE_RECORDED();
  const fs::path dir = configured("TESSEL_SENTENCEPIECE_DIR", TESSEL_SENTENCEPIECE_DIR);
  expect_matches(Tokenizer::load((dir / "llama2_bpe" / "tokenizer.json").string()),
                 recorded().at("models").at("llama2_bpe"), true, 2000);
}

// The reference's Unigram (0.2.0) has no byte_fallback: where it falls back to <unk> (id 0)
// Hugging Face's Rust crate and tessel give byte tokens, so those strings are left out. The rest
// include what SentencePiece itself does differently (control pieces matched in text, ties
// broken in f64), where tessel must agree with the reference.
TEST(TokenizerJsonReference, Unigram) {
  REQUIRE_RECORDED();
  const fs::path dir = configured("TESSEL_SENTENCEPIECE_DIR", TESSEL_SENTENCEPIECE_DIR);
  const auto has_unk = [](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), 0) != ids.end();
  };
  expect_matches(Tokenizer::load((dir / "unigram_json").string()),
                 recorded().at("models").at("unigram_json"), true, 400, has_unk);
}

// GPT-2's vocabulary and merges as tokenizer.ggml.* keys, with each pre-tokenizer name (and an
// alias llama.cpp gives the same definition), read back from the file's bytes.
TEST(TokenizerJsonReference, GgufPreTokenizers) {
  REQUIRE_RECORDED();
  const fs::path dir = configured("TESSEL_TOKENIZER_JSON_DIR", TESSEL_TOKENIZER_JSON_DIR);
  GgufMetadata m;
  Tokenizer::load((dir / "llama3_regex").string()).to_gguf(m);
  // Llama 3's regex without ignore_merges is what llama.cpp calls "dbrx".
  EXPECT_EQ(m.at("tokenizer.ggml.pre", "test").str, "dbrx");
  const std::vector<std::pair<std::string, std::string>> names = {
      {"llama-bpe", "llama-bpe"},
      {"llama3", "llama-bpe"},
      {"qwen2", "qwen2"},
      {"qwen35", "qwen35"},
      {"gpt-4o", "gpt-4o"},
      {"llama4", "gpt-4o"},
      {"tekken", "tekken"},
      {"starcoder", "starcoder"},
      {"command-r", "starcoder"},
      {"deepseek-coder", "deepseek-coder"},
      {"deepseek-llm", "deepseek-llm"},
      {"deepseek-v3", "deepseek-v3"}};
  for (const auto& [name, recorded_as] : names) {
    SCOPED_TRACE(name);
    m.set("tokenizer.ggml.pre", GgufValue::of_string(name));
    const std::vector<uint8_t> bytes = serialize_gguf(m, {});
    const GgufHeader h = parse_gguf(bytes.data(), bytes.size(), name + ".gguf");
    const Tokenizer tok = Tokenizer::from_gguf(h.metadata, name + ".gguf");
    expect_matches(tok, recorded().at("models").at("gguf_" + recorded_as), false, 4000);
    GgufMetadata again;
    tok.to_gguf(again);
    EXPECT_EQ(again.at("tokenizer.ggml.pre", "test").str, name);
  }
}

}  // namespace
}  // namespace tessel::io
