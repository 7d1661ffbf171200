// SPDX-License-Identifier: Apache-2.0
// A GGUF token list padded to the model's vocabulary (llama.cpp refuses a token_embd taller than
// the list): the placeholders are UNUSED tokens with the lowest score, the byte-level BPE and
// SentencePiece tokenizers read back from the padded keys encode and decode as before, a list of
// the right size is left alone and a longer one is a clear error.
#include "tessel/io/gguf_vocab_pad.h"

#include <gtest/gtest.h>

#include "common/tokenizer_test_util.h"
#include "tessel/io/sentencepiece_model.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {
namespace {

const std::vector<std::string> kTexts = {"the cat in a hat!", "  two  spaces ",
                                         "he\xC3\xA9!",       "",
                                         "x[PAD5]y[PAD270]",  "abc<|endoftext|>the"};

Tokenizer byte_level() {
  TokenizerConfig c = small_config();
  c.vocab.push_back("<|endoftext|>");
  c.added_tokens.push_back({int32_t(c.vocab.size() - 1), "<|endoftext|>", true});
  return Tokenizer(c);
}

Tokenizer sentencepiece() {
  using Type = SentencePieceModel::PieceType;
  SentencePieceModel m;
  m.source = "test sentencepiece";
  m.model_type = SentencePieceModel::ModelType::kBpe;
  m.byte_fallback = true;
  m.normalizer.present = true;
  m.normalizer.name = "identity";
  m.normalizer.remove_extra_whitespaces = false;
  m.pieces = {
      {"<unk>", 0, Type::kUnknown}, {"<s>", 0, Type::kControl}, {"</s>", 0, Type::kControl}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m.pieces.push_back({name, 0, Type::kByte});
  }
  float score = -1;
  for (const char* p : {"t", "h", "e", "a", "c", "he", "at", "P", "A", "D", "["})
    m.pieces.push_back({p, score--, Type::kNormal});
  return Tokenizer::from_sentencepiece_model(m);
}

// The tokenizer's keys padded to `vocab`, written to a file's bytes and read back.
Tokenizer padded(const Tokenizer& tok, int64_t vocab, GgufMetadata& m) {
  m.set("general.architecture", GgufValue::of_string("test"));
  tok.to_gguf(m);
  pad_gguf_vocabulary(m, vocab);
  const std::vector<uint8_t> bytes = serialize_gguf(m, {});
  const GgufHeader h = parse_gguf(bytes.data(), bytes.size(), "pad.gguf");
  return Tokenizer::from_gguf(h.metadata, "pad.gguf");
}

void expect_padded(const Tokenizer& tok, int64_t extra) {
  const int64_t n = tok.vocab_size(), vocab = n + extra;
  GgufMetadata m;
  const Tokenizer back = padded(tok, vocab, m);
  ASSERT_EQ(back.vocab_size(), vocab);
  const auto& tokens = m.at("tokenizer.ggml.tokens", "").as_array("");
  const auto& types = m.at("tokenizer.ggml.token_type", "").as_array("");
  ASSERT_EQ(int64_t(tokens.size()), vocab);
  ASSERT_EQ(int64_t(types.size()), vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    if (i < n) {
      EXPECT_EQ(tokens[size_t(i)].as_string(""), tok.token(int32_t(i)));
      EXPECT_NE(types[size_t(i)].as_int(""), 5);
    } else {
      EXPECT_EQ(tokens[size_t(i)].as_string(""), "[PAD" + std::to_string(i) + "]");
      EXPECT_EQ(types[size_t(i)].as_int(""), 5);
    }
  }
  if (const GgufValue* scores = m.find("tokenizer.ggml.scores")) {
    const auto& s = scores->as_array("");
    ASSERT_EQ(int64_t(s.size()), vocab);
    double lowest = 0;
    for (int64_t i = 0; i < n; ++i) lowest = std::min(lowest, s[size_t(i)].as_double(""));
    for (int64_t i = n; i < vocab; ++i) EXPECT_LT(s[size_t(i)].as_double(""), lowest);
  }
  // The placeholders are never produced: every text, its own spelling included, encodes as before.
  for (const std::string& text : kTexts) {
    for (bool special : {false, true}) {
      const auto ids = tok.encode(text, special);
      EXPECT_EQ(back.encode(text, special), ids) << text;
      EXPECT_EQ(back.decode(ids), tok.decode(ids)) << text;
    }
  }
  EXPECT_EQ(back.eos_token_id(), tok.eos_token_id());
}

TEST(GgufVocabPad, ByteLevelBpeIsPaddedWithUnusedPlaceholders) {
  expect_padded(byte_level(), 7);
  expect_padded(byte_level(), 13);
}

TEST(GgufVocabPad, SentencePieceIsPaddedWithTheLowestScores) {
  expect_padded(sentencepiece(), 7);
  expect_padded(sentencepiece(), 33);
}

TEST(GgufVocabPad, AListOfTheVocabularySizeIsLeftAlone) {
  const Tokenizer tok = byte_level();
  GgufMetadata m, before;
  tok.to_gguf(m);
  tok.to_gguf(before);
  pad_gguf_vocabulary(m, tok.vocab_size());
  EXPECT_EQ(m.at("tokenizer.ggml.tokens", "").as_array(""),
            before.at("tokenizer.ggml.tokens", "").as_array(""));
  GgufMetadata none;
  pad_gguf_vocabulary(none, 13);  // no tokenizer: nothing to pad
  EXPECT_EQ(none.size(), 0u);
}

TEST(GgufVocabPad, MoreTokensThanTheVocabularyIsAnError) {
  const Tokenizer tok = byte_level();
  GgufMetadata m;
  tok.to_gguf(m);
  expect_error([&] { pad_gguf_vocabulary(m, 33); },
               {std::to_string(tok.vocab_size()) + " tokens", "vocabulary of 33"});
}

}  // namespace
}  // namespace tessel::io
