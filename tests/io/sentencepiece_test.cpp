// SPDX-License-Identifier: Apache-2.0
// SentencePiece models written by hand (a small protobuf writer below), so each rule can be seen
// on a few pieces: BPE merges by score with the leftmost first, unused pieces split back, unigram
// Viterbi with unknown runs, byte fallback, user-defined pieces, white space rules, the decoding
// rules, and every malformed file as one clear error. The comparison with the library itself is
// tests/io/sentencepiece/.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "common/tokenizer_test_util.h"
#include "tessel/io/sentencepiece_model.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;
using Type = SentencePieceModel::PieceType;

// Protobuf wire format, enough for a ModelProto.
std::string varint(uint64_t v) {
  std::string out;
  do {
    out += char((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return out;
}
std::string tag(int field, int wire) {
  return varint(uint64_t(field) << 3 | uint64_t(wire));
}
std::string bytes_field(int field, const std::string& value) {
  return tag(field, 2) + varint(value.size()) + value;
}
std::string varint_field(int field, uint64_t value) {
  return tag(field, 0) + varint(value);
}
std::string float_field(int field, float value) {
  char b[4];
  std::memcpy(b, &value, 4);
  return tag(field, 5) + std::string(b, 4);
}

struct ProtoPiece {
  std::string piece;
  float score;
  Type type = Type::kNormal;
};

struct ProtoModel {
  std::vector<ProtoPiece> pieces;
  int model_type = 2;  // BPE
  bool byte_fallback = false;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true;
  std::string charsmap;

  std::string serialize(bool specs = true) const {
    std::string out;
    for (const auto& p : pieces) {
      out += bytes_field(
          1, bytes_field(1, p.piece) + float_field(2, p.score) + varint_field(3, uint64_t(p.type)));
    }
    if (!specs) return out;
    out += bytes_field(
        2, varint_field(3, uint64_t(model_type)) + varint_field(35, byte_fallback ? 1 : 0));
    std::string norm = bytes_field(1, "identity") + varint_field(3, add_dummy_prefix) +
                       varint_field(4, remove_extra_whitespaces);
    if (!charsmap.empty()) norm += bytes_field(2, charsmap);
    out += bytes_field(3, norm);
    return out;
  }
};

const std::string M = "\xE2\x96\x81";  // U+2581

// <unk> <s> </s>, then pieces for "▁", "a", "b", "c", "ab", "bc", "▁a", "abc".
ProtoModel small_bpe() {
  ProtoModel m;
  m.pieces = {{"<unk>", 0, Type::kUnknown},
              {"<s>", 0, Type::kControl},
              {"</s>", 0, Type::kControl},
              {M, -1},
              {"a", -2},
              {"b", -3},
              {"c", -4},
              {"ab", -5},
              {"bc", -5},
              {M + "a", -6},
              {"abc", -7}};
  return m;
}

Tokenizer load(const ProtoModel& m, const std::string& name) {
  const fs::path dir = temp_dir("sp_" + name);
  return Tokenizer::from_sentencepiece(write_file(dir / (name + ".model"), m.serialize()));
}

TEST(SentencePiece, BpeMergesByScoreLeftmostFirst) {
  const Tokenizer tok = load(small_bpe(), "bpe");
  // "▁abc": ab (-5) and bc (-5) tie: the leftmost wins, then ab+c = abc (-7) beats ▁+ab (none).
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{3, 10}));
  EXPECT_EQ(tok.encode("bc"), (std::vector<int32_t>{3, 8}));
  EXPECT_EQ(tok.encode("a"), (std::vector<int32_t>{9}));
  // Unknown characters: one <unk> for a run (no byte fallback), decoded as " ⁇ ".
  EXPECT_EQ(tok.encode("axyb"), (std::vector<int32_t>{9, 0, 5}));
  EXPECT_EQ(tok.decode(tok.encode("axyb")), "a \xE2\x81\x87 b");
  // White space: leading/trailing removed, runs collapsed (remove_extra_whitespaces).
  EXPECT_EQ(tok.encode("  a   b  "), tok.encode("a b"));
  EXPECT_EQ(tok.decode(tok.encode("a b")), "a b");
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_TRUE(tok.encode("   ").empty());
  // Control pieces decode to nothing and do not count as text for the leading-space rule.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{1, 9, 3, 5, 2}), "a b");
  EXPECT_EQ(tok.token(9), M + "a");
  EXPECT_EQ(tok.special_token_id("</s>"), 2);
}

TEST(SentencePiece, UnusedPiecesAreSplitBack) {
  ProtoModel m = small_bpe();
  m.pieces[10].type = Type::kUnused;  // "abc" may be merged, then is split into ab + c
  const Tokenizer tok = load(m, "unused");
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{3, 7, 6}));
}

TEST(SentencePiece, ByteFallbackAndUserDefinedPieces) {
  ProtoModel m = small_bpe();
  m.byte_fallback = true;
  m.remove_extra_whitespaces = false;
  m.pieces.push_back({"<x>", 0, Type::kUserDefined});
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m.pieces.push_back({name, 0, Type::kByte});
  }
  const Tokenizer tok = load(m, "bytes");
  const int32_t byte0 = 12;
  // "é" is not a piece: its two UTF-8 bytes become byte pieces.
  EXPECT_EQ(tok.encode("a\xC3\xA9"), (std::vector<int32_t>{9, byte0 + 0xC3, byte0 + 0xA9}));
  EXPECT_EQ(tok.decode(tok.encode("a\xC3\xA9")), "a\xC3\xA9");
  // A user-defined piece is never split or merged, and is not normalized.
  EXPECT_EQ(tok.encode("a<x>b"), (std::vector<int32_t>{9, 11, 5}));
  // Spaces are kept (remove_extra_whitespaces false): "  a" is ▁ ▁ ▁a.
  EXPECT_EQ(tok.encode("  a"), (std::vector<int32_t>{3, 3, 9}));
  EXPECT_EQ(tok.decode(tok.encode("  a")), "  a");
  // Ill-formed bytes decode to one U+FFFD each, as the library does.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{9, byte0 + 0xE4, byte0 + 0xB8, 5}),
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(tok.decode_bytes(std::vector<int32_t>{byte0 + 0xE4, byte0 + 0xB8}), "\xE4\xB8");
  // Streaming holds back an unfinished character and gives the same text.
  StreamDecoder stream = tok.stream_decoder();
  EXPECT_EQ(stream.push(9), "a");
  EXPECT_EQ(stream.push(byte0 + 0xE4), "");
  EXPECT_EQ(stream.push(byte0 + 0xB8), "");
  EXPECT_EQ(stream.push(byte0 + 0xAD), "\xE4\xB8\xAD");
  EXPECT_EQ(stream.push(byte0 + 0xE4), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
}

TEST(SentencePiece, UnigramViterbi) {
  ProtoModel m;
  m.model_type = 1;
  m.pieces = {{"<unk>", 0, Type::kUnknown},
              {M, -2},
              {"a", -3},
              {"b", -3},
              {"ab", -5.5f},
              {M + "a", -4},
              {M + "ab", -8.5f}};
  const Tokenizer tok = load(m, "unigram");
  // ▁ab: ▁a + b (-7) beats ▁ + ab (-7.5) and ▁ab (-8.5).
  EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{5, 3}));
  // Unknown characters score min - 10 each and a run of them is one <unk>.
  EXPECT_EQ(tok.encode("axyz"), (std::vector<int32_t>{5, 0}));
  EXPECT_EQ(tok.decode(tok.encode("a b")), "a b");
}

TEST(SentencePiece, MalformedModelsAreClearErrors) {
  const fs::path dir = temp_dir("sp_bad");
  auto bad = [&](const std::string& name, const std::string& bytes,
                 const std::vector<std::string>& parts) {
    SCOPED_TRACE(name);
    const std::string path = write_file(dir / (name + ".model"), bytes);
    std::vector<std::string> all = parts;
    all.push_back(path);
    expect_error([&] { Tokenizer::from_sentencepiece(path); }, all);
  };
  const std::string good = small_bpe().serialize();
  bad("empty", "", {"the file is empty"});
  bad("truncated", good.substr(0, good.size() / 2), {"runs past the end"});
  bad("varint", good + "\x48\xFF\xFF", {"varint is truncated"});
  bad("overlong", good + "\x48" + std::string(10, '\xFF') + "\x01", {"varint"});
  bad("wire", bytes_field(1, tag(2, 0) + varint(5)) + good, {"score", "wire type 0"});
  bad("group", good + tag(9, 3), {"wire type 3"});
  bad("not_a_model", "{\"model\": 1}", {"tokenizer: "});
  ProtoModel m = small_bpe();
  m.model_type = 3;
  bad("word", m.serialize(), {"model_type WORD is not supported (supported: UNIGRAM, BPE)"});
  m = small_bpe();
  m.pieces.erase(m.pieces.begin());
  bad("no_unk", m.serialize(), {"no unknown piece"});
  m = small_bpe();
  m.pieces.push_back({"<0x41>", 0, Type::kByte});
  bad("byte_without_fallback", m.serialize(), {"byte piece '<0x41>'", "byte_fallback is false"});
  m.byte_fallback = true;
  bad("missing_bytes", m.serialize(), {"no piece <0x00>"});
  m = small_bpe();
  m.pieces.push_back({"a", -9});
  bad("duplicate", m.serialize(), {"piece 'a' is defined twice (ids 4 and 11)"});
  m = small_bpe();
  m.charsmap = std::string("\xFF\xFF\x00\x00", 4) + "xx";
  bad("charsmap", m.serialize(), {"precompiled_charsmap", "corrupt"});
  // A file cut between fields is still a protobuf message: the missing specs give it away.
  bad("cut_between_fields", small_bpe().serialize(false), {"no trainer_spec"});
}

// A SentencePiece-style tokenizer.json with the Metaspace pre-tokenizer (the current Llama 2
// layout) and with the legacy normalizer give the same ids where they agree by design.
nlohmann::json sp_json() {
  using nlohmann::json;
  json vocab = json::object();
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", M, "a", "b", M + "a", "ab"};
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = tokens.size() + b;
  }
  return {{"added_tokens",
           {{{"id", 1}, {"content", "<s>"}, {"special", true}},
            {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", M}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", M}}}}}},
          {"pre_tokenizer", nullptr},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", M}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"byte_fallback", true},
            {"fuse_unk", true},
            {"vocab", vocab},
            {"merges", json::array({json::array({M, "a"}), json::array({"a", "b"})})}}}};
}

TEST(SentencePieceJson, LegacyAndMetaspaceLayouts) {
  const fs::path dir = temp_dir("sp_json");
  nlohmann::json j = sp_json();
  const Tokenizer legacy =
      Tokenizer::from_tokenizer_json(write_file(dir / "legacy.json", j.dump()));
  // ▁ a b ▁ a: the merge of rank 0 (▁ a) goes first, everywhere; then a b has no a left.
  EXPECT_EQ(legacy.encode("ab a"), (std::vector<int32_t>{6, 5, 6}));
  EXPECT_EQ(legacy.encode("a\xC3\xA9").size(), 3u);  // ▁a, then é as two byte tokens
  EXPECT_EQ(legacy.decode(legacy.encode("a\xC3\xA9 b")), "a\xC3\xA9 b");
  EXPECT_EQ(legacy.decode(std::vector<int32_t>{1, 6}), "<s> a");  // as Hugging Face's decode
  EXPECT_TRUE(legacy.settings().bos_token == std::nullopt);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", M}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", M}, {"prepend_scheme", "first"}};
  const Tokenizer meta = Tokenizer::from_tokenizer_json(write_file(dir / "meta.json", j.dump()));
  EXPECT_EQ(meta.encode("ab a"), legacy.encode("ab a"));
  // "first": only the text at the start of the input gets the prefix.
  EXPECT_EQ(meta.encode("<s>ab", true), (std::vector<int32_t>{1, 7}));
  EXPECT_EQ(legacy.encode("<s>ab", true), (std::vector<int32_t>{1, 6, 5}));
  EXPECT_EQ(meta.decode(meta.encode("ab a")), "ab a");
}

TEST(SentencePieceJson, BadFilesAreClearErrors) {
  const fs::path dir = temp_dir("sp_json_bad");
  struct Bad {
    std::string name;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> parts;
  };
  const std::vector<Bad> cases = {
      {"wordlevel",
       [](auto& j) { j["model"]["type"] = "WordLevel"; },
       {"model.type \"WordLevel\" is not supported (supported: BPE, Unigram)"}},
      {"nfkc",
       [](auto& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       {"normalizer 'NFKC' is not supported"}},
      {"precompiled",
       [](auto& j) {
         j["normalizer"]["normalizers"][0] = {{"type", "Precompiled"},
                                              {"precompiled_charsmap", ""}};
       },
       {"normalizer.normalizers[0]", "'Precompiled' is not supported"}},
      {"regex_replace",
       [](auto& j) {
         j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " {2,}"}};
       },
       {"only {\"String\": ...} patterns"}},
      {"decoder",
       [](auto& j) {
         j["decoder"]["decoders"][1] = {{"type", "CTC"}};
       },
       {"decoders[1]", "'CTC' is not supported"}},
      {"no_decoder", [](auto& j) { j.erase("decoder"); }, {"has no decoder"}},
      {"unk",
       [](auto& j) { j["model"]["unk_token"] = "<nope>"; },
       {"unk_token '<nope>' is not in the vocabulary"}},
      {"merge",
       [](auto& j) {
         j["model"]["merges"][1] = {"b", "b"};
       },
       {"merges[1] 'b b'", "merged token 'bb'"}},
      {"unigram_vocab",
       [](auto& j) {
         j["model"] = {{"type", "Unigram"},
                       {"vocab", nlohmann::json::array({nlohmann::json::array({"a", "x"})})}};
       },
       {"model.vocab[0]", "must be [piece, score]"}},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    nlohmann::json j = sp_json();
    c.edit(j);
    const std::string path = write_file(dir / (c.name + ".json"), j.dump());
    std::vector<std::string> parts = c.parts;
    parts.push_back(path);
    expect_error([&] { Tokenizer::from_tokenizer_json(path); }, parts);
  }
  const std::string text = sp_json().dump();
  const std::string cut = write_file(dir / "cut.json", text.substr(0, text.size() / 2));
  expect_error([&] { Tokenizer::load(cut); }, {cut, "is not valid JSON"});
}

TEST(TokenizerConfig, SettingsFromConfigFile) {
  const fs::path dir = temp_dir("sp_config");
  write_file(dir / "tokenizer.json", sp_json().dump());
  write_file(dir / "tokenizer_config.json",
             R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
                 "add_bos_token": true, "add_eos_token": true, "model_max_length": 2048,
                 "chat_template": [{"name": "default", "template": "T"},
                                   {"name": "tool_use", "template": "U"}]})");
  const Tokenizer tok = Tokenizer::load(dir.string());
  EXPECT_EQ(tok.settings().model_max_length, 2048);
  EXPECT_EQ(tok.settings().chat_template, "T");
  EXPECT_EQ(tok.settings().named_chat_templates.size(), 2u);
  EXPECT_EQ(tok.encode_with_special_tokens("a"), (std::vector<int32_t>{1, 6, 2}));
  write_file(dir / "tokenizer_config.json", R"({"eos_token": "<eot>"})");
  expect_error([&] { Tokenizer::load(dir.string()); },
               {"tokenizer_config.json", "token '<eot>' is not in the vocabulary"});
  write_file(dir / "tokenizer_config.json", R"({"bos_token": 5})");
  expect_error([&] { Tokenizer::load(dir.string()); }, {"bos_token must be a string"});
}

// Byte-level BPE: streamed pieces are well-formed and add up to decode(), including ids whose
// bytes are ill-formed or cut characters between tokens.
TEST(StreamDecoder, ByteLevelEqualsWholeDecode) {
  const Tokenizer tok(small_config());
  std::mt19937 gen(3);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> ids(gen() % 12);
    for (int32_t& id : ids) {
      // Mostly bytes of multi-byte characters, so that characters span tokens.
      id = gen() % 3 ? int32_t(0x80 + gen() % 0x78) : int32_t(gen() % tok.vocab_size());
    }
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      ASSERT_TRUE(is_valid_utf8(piece));
      streamed += piece;
    }
    streamed += stream.finish();
    ASSERT_EQ(streamed, tok.decode(ids));
  }
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(0xE4), "");  // 中 = E4 B8 AD, one byte token each
  EXPECT_EQ(stream.push(0xB8), "");
  EXPECT_EQ(stream.push(0xAD), "\xE4\xB8\xAD");
  EXPECT_EQ(stream.push(0xE4), "");
  EXPECT_EQ(stream.push('a'),
            "\xEF\xBF\xBD"
            "a");
  expect_error([&] { stream.push(100000); }, {"out of range"});
}

}  // namespace
}  // namespace tessel::io
