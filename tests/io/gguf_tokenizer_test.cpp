// SPDX-License-Identifier: Apache-2.0
// Tokenizers through GGUF metadata: a byte-level BPE ("gpt2", with each pre-tokenizer name) and a
// SentencePiece BPE with byte fallback ("llama") written as tokenizer.ggml.* keys and read back
// encode and decode exactly as the originals, with the same special tokens and chat template, and
// write the same keys again; bad keys are clear errors. (Ids against reference encoders: the
// tokenizer.json and SentencePiece reference tests.)
#include <gtest/gtest.h>

#include <cstdio>

#include "common/error_text.h"
#include "common/tokenizer_test_util.h"
#include "tessel/io/gguf.h"
#include "tessel/io/sentencepiece_model.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {
namespace {

const std::vector<std::string> kTexts = {"the cat in a hat!",   "  two  spaces ",
                                         "he\xC3\xA9!",         "",
                                         "abc<|endoftext|>the", "\xF0\x9F\x98\x80 x"};

// Writes the tokenizer's keys into a file's bytes and reads them back.
Tokenizer round_trip(const Tokenizer& tok) {
  GgufMetadata m;
  m.set("general.architecture", GgufValue::of_string("test"));
  tok.to_gguf(m);
  const std::vector<uint8_t> bytes = serialize_gguf(m, {});
  const GgufHeader h = parse_gguf(bytes.data(), bytes.size(), "tok.gguf");
  return Tokenizer::from_gguf(h.metadata, "tok.gguf");
}

void expect_same(const Tokenizer& a, const Tokenizer& b) {
  ASSERT_EQ(a.vocab_size(), b.vocab_size());
  for (const std::string& text : kTexts) {
    for (bool special : {false, true}) {
      const auto ids = a.encode(text, special);
      EXPECT_EQ(b.encode(text, special), ids) << text;
      EXPECT_EQ(b.decode(ids), a.decode(ids)) << text;
    }
  }
  EXPECT_EQ(a.bos_token_id(), b.bos_token_id());
  EXPECT_EQ(a.eos_token_id(), b.eos_token_id());
  EXPECT_EQ(a.settings().chat_template, b.settings().chat_template);
}

TEST(GgufTokenizer, ByteLevelBpeRoundTrips) {
  TokenizerConfig c = small_config();
  c.vocab.push_back("<|endoftext|>");
  c.added_tokens.push_back({int32_t(c.vocab.size() - 1), "<|endoftext|>", true});
  const Tokenizer tok(c);
  const Tokenizer back = round_trip(tok);
  expect_same(tok, back);
  EXPECT_EQ(back.special_token_id("<|endoftext|>"), int32_t(c.vocab.size() - 1));
  EXPECT_EQ(back.bpe_merges(), tok.bpe_merges());
}

SentencePieceModel byte_fallback_model() {
  using Type = SentencePieceModel::PieceType;
  SentencePieceModel m;
  m.source = "test sentencepiece";
  m.model_type = SentencePieceModel::ModelType::kBpe;
  m.byte_fallback = true;
  m.normalizer.present = true;
  m.normalizer.name = "identity";
  m.normalizer.remove_extra_whitespaces = false;
  const std::string s = "\xE2\x96\x81";
  m.pieces = {
      {"<unk>", 0, Type::kUnknown}, {"<s>", 0, Type::kControl}, {"</s>", 0, Type::kControl}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m.pieces.push_back({name, 0, Type::kByte});
  }
  float score = -1;
  for (const std::string& p :
       std::vector<std::string>{s, "t", "h", "e", "a", "c", "i", "n", "x", s + "t", "he", s + "the",
                                s + "a", "at", s + "c", s + "cat", "in"})
    m.pieces.push_back({p, score--, Type::kNormal});
  return m;
}

TEST(GgufTokenizer, SentencePieceWithByteFallbackRoundTrips) {
  const Tokenizer tok = Tokenizer::from_sentencepiece_model(byte_fallback_model());
  const Tokenizer back = round_trip(tok);
  expect_same(tok, back);
  EXPECT_EQ(back.bos_token_id(), 1);
  EXPECT_EQ(back.eos_token_id(), 2);
  // Byte fallback survives: "é" is two byte pieces.
  EXPECT_EQ(back.encode("\xC3\xA9").size(), 3u);
}

TEST(GgufTokenizer, SettingsAndChatTemplateAreRead) {
  GgufMetadata m;
  Tokenizer::from_sentencepiece_model(byte_fallback_model()).to_gguf(m);
  m.set("tokenizer.chat_template", GgufValue::of_string("{{ messages }}"));
  m.set("tokenizer.ggml.add_bos_token", GgufValue::of_bool(true));
  const Tokenizer tok = Tokenizer::from_gguf(m, "t.gguf");
  EXPECT_EQ(tok.settings().chat_template, "{{ messages }}");
  EXPECT_EQ(tok.encode_with_special_tokens("cat").front(), 1);
}

TEST(GgufTokenizer, BadKeysAreClearErrors) {
  GgufMetadata m;
  Tokenizer::from_sentencepiece_model(byte_fallback_model()).to_gguf(m);
  GgufMetadata bert = m;
  bert.set("tokenizer.ggml.model", GgufValue::of_string("bert"));
  test::expect_error([&] { Tokenizer::from_gguf(bert, "t.gguf"); },
                     {"t.gguf", "tokenizer.ggml.model 'bert'", "not supported", "t5"});
  GgufMetadata t5 = m;
  t5.set("tokenizer.ggml.model", GgufValue::of_string("t5"));
  t5.set("tokenizer.ggml.precompiled_charsmap", GgufValue::of_strings({"x"}));
  test::expect_error([&] { Tokenizer::from_gguf(t5, "t.gguf"); },
                     {"tokenizer.ggml.precompiled_charsmap", "u8 or i8", "array of string"});
  GgufMetadata t5_unscored = m;
  t5_unscored.set("tokenizer.ggml.model", GgufValue::of_string("t5"));
  GgufMetadata without_scores;
  for (const auto& [key, value] : t5_unscored.entries())
    if (key != "tokenizer.ggml.scores") without_scores.set(key, value);
  test::expect_error([&] { Tokenizer::from_gguf(without_scores, "t.gguf"); },
                     {"tokenizer.ggml.scores is missing", "unigram"});
  GgufMetadata short_scores = m;
  short_scores.set("tokenizer.ggml.scores", GgufValue::of_array(GgufType::F32, {}));
  test::expect_error([&] { Tokenizer::from_gguf(short_scores, "t.gguf"); },
                     {"tokenizer.ggml.scores has 0 entries"});
  GgufMetadata bad_bos = m;
  bad_bos.set("tokenizer.ggml.bos_token_id", GgufValue::of_u32(100000));
  test::expect_error([&] { Tokenizer::from_gguf(bad_bos, "t.gguf"); },
                     {"tokenizer.ggml.bos_token_id = 100000", "not a token id"});
  GgufMetadata none;
  test::expect_error([&] { Tokenizer::from_gguf(none, "t.gguf"); },
                     {"t.gguf", "'tokenizer.ggml.model' is missing"});
  GgufMetadata gpt2;
  Tokenizer(small_config()).to_gguf(gpt2);
  gpt2.set("tokenizer.ggml.merges", GgufValue::of_strings({"a b c"}));
  test::expect_error([&] { Tokenizer::from_gguf(gpt2, "t.gguf"); },
                     {"tokenizer.ggml.merges[0] 'a b c'"});
  Tokenizer(small_config()).to_gguf(gpt2);
  gpt2.set("tokenizer.ggml.pre", GgufValue::of_string("bloom"));
  test::expect_error([&] { Tokenizer::from_gguf(gpt2, "t.gguf"); },
                     {"tokenizer.ggml.pre 'bloom' is not supported", "llama-bpe", "deepseek-v3"});
  TokenizerConfig chain = small_config();
  chain.pattern.reset();
  chain.then_patterns = {"\\p{N}"};
  test::expect_error([&] { Tokenizer{chain}; }, {"further pre-tokenizer regexes need a first one"});
  TokenizerConfig prefixed = small_config();
  prefixed.add_prefix_space = true;
  test::expect_error([&] { Tokenizer(prefixed).to_gguf(gpt2); }, {"add_prefix_space", "cannot"});
  TokenizerConfig odd = small_config();
  odd.pattern = "\\p{L}+|\\P{L}";
  test::expect_error([&] { Tokenizer(odd).to_gguf(gpt2); },
                     {"regex '\\p{L}+|\\P{L}'", "none that GGUF names", "gpt-4o"});
}

// Every name tessel reads is written back as it was read, and a second read gives the same
// tokenizer: read -> write -> read is identical, key for key.
TEST(GgufTokenizer, PreTokenizerNamesRoundTrip) {
  GgufMetadata first;
  Tokenizer(small_config()).to_gguf(first);
  EXPECT_EQ(first.at("tokenizer.ggml.pre", "t").str, "gpt-2");
  for (const char* name : {"gpt-2", "default", "llama-bpe", "llama3", "dbrx", "smaug-bpe", "qwen2",
                           "deepseek-r1-qwen", "qwen35", "gpt-4o", "llama4", "tekken", "starcoder",
                           "command-r", "deepseek-coder", "deepseek-llm", "deepseek-v3"}) {
    SCOPED_TRACE(name);
    first.set("tokenizer.ggml.pre", GgufValue::of_string(name));
    const Tokenizer a = Tokenizer::from_gguf(first, "a.gguf");
    EXPECT_EQ(a.pretokenizer_name(), name);
    const Tokenizer b = round_trip(a);
    expect_same(a, b);
    GgufMetadata wa, wb;
    a.to_gguf(wa);
    b.to_gguf(wb);
    EXPECT_EQ(wa.entries(), wb.entries());
    EXPECT_EQ(wa.at("tokenizer.ggml.pre", "t").str, name);
  }
}

// Llama 3's and Tekken's names imply ignore_merges and BOS (llama.cpp's loader), the others
// neither: a vocabulary token that no merge reaches is taken whole only under the former.
TEST(GgufTokenizer, PreTokenizerNameSetsMergeRuleAndBos) {
  TokenizerConfig c = small_config();
  c.merges.erase(c.merges.begin() + 3);  // Ġt + he -> Ġthe: the token stays, unreachable
  GgufMetadata m;
  Tokenizer(c).to_gguf(m);
  GgufMetadata bare;  // without add_bos_token, to see each name's default
  for (const auto& [key, value] : m.entries())
    if (key != "tokenizer.ggml.add_bos_token") bare.set(key, value);
  const int32_t the = 256 + 3, gt = 256 + 1, he = 256 + 2;
  for (const char* name : {"llama-bpe", "tekken"}) {
    bare.set("tokenizer.ggml.pre", GgufValue::of_string(name));
    const Tokenizer tok = Tokenizer::from_gguf(bare, "t.gguf");
    EXPECT_TRUE(tok.ignores_merges()) << name;
    EXPECT_EQ(tok.encode(" the"), (std::vector<int32_t>{the})) << name;
    EXPECT_TRUE(tok.settings().add_bos_token) << name;
  }
  for (const char* name : {"dbrx", "qwen2", "gpt-4o", "gpt-2"}) {
    bare.set("tokenizer.ggml.pre", GgufValue::of_string(name));
    const Tokenizer tok = Tokenizer::from_gguf(bare, "t.gguf");
    EXPECT_FALSE(tok.ignores_merges()) << name;
    EXPECT_EQ(tok.encode(" the"), (std::vector<int32_t>{gt, he})) << name;
    EXPECT_FALSE(tok.settings().add_bos_token) << name;
  }
}

}  // namespace
}  // namespace tessel::io
