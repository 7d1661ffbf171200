// SPDX-License-Identifier: Apache-2.0
// SentencePiece models trained by the reference library (Debian's python3-sentencepiece, see
// tests/io/sentencepiece_fixture.py) on the fortunes package: tessel must give the library's ids
// and decoded text on more than 2,000 held-out and hard strings, decode arbitrary id sequences as
// it does, load the tokenizer.json files converted from the same models to the same ids, stream
// decode to the same text, and refuse truncated files with an error naming them. Written as GGUF
// metadata the way llama.cpp's converter writes them ("llama" for BPE, "t5" for unigram with the
// character map as bytes), the models must still give the library's ids and text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/scratch_dir.h"
#include "tessel/core/error.h"
#include "tessel/io/byte_level.h"
#include "tessel/io/gguf.h"
#include "tessel/io/sentencepiece_model.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Case {
  std::string kind, text;
  std::vector<int32_t> ids;
  std::string decoded;
};
struct Decode {
  std::vector<int32_t> ids;
  std::string text;
};
struct Recorded {
  std::vector<Case> cases;
  std::vector<Decode> decodes;
  int64_t vocab_size = 0;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Loaded once. Missing files fail every test (never skip): run through ctest, whose fixture
// io.sentencepiece_setup trains the models and records the reference.
struct Reference {
  std::string error;
  fs::path dir;
  std::map<std::string, Recorded> models;

  Reference() {
    const char* env = std::getenv("TESSEL_SENTENCEPIECE_DIR");
    dir = env && *env ? env : TESSEL_SENTENCEPIECE_DIR;
    if (!fs::exists(dir / "expected.json")) {
      error = "no " + (dir / "expected.json").string() +
              ": run these tests through ctest, whose fixture io.sentencepiece_setup trains the "
              "models and records the reference ids";
      return;
    }
    const json j = json::parse(read_file(dir / "expected.json"));
    for (const auto& [name, m] : j.at("models").items()) {
      Recorded r;
      for (const json& c : m.at("cases")) {
        r.cases.push_back(
            {c.at("kind"), c.at("text"), c.at("ids").get<std::vector<int32_t>>(), c.at("decoded")});
      }
      for (const json& d : m.at("decodes")) {
        r.decodes.push_back({d.at("ids").get<std::vector<int32_t>>(), d.at("text")});
      }
      r.vocab_size = m.at("vocab_size");
      models[name] = std::move(r);
    }
  }
};

const Reference& reference() {
  static const Reference r;
  return r;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// Every case's ids (and, with check_decode, decoded text) must equal the reference's; the first
// few differences are reported in full.
// `tie`, when given, accepts ids that differ from the reference's by an exact tie.
void expect_matches(const Tokenizer& tok, const std::vector<Case>& cases, bool check_decode,
                    const std::function<bool(const Case&)>& skip = {},
                    const std::function<bool(const std::vector<int32_t>&, const Case&)>& tie = {}) {
  size_t wrong = 0, checked = 0, ties = 0;
  for (const Case& c : cases) {
    if (skip && skip(c)) continue;
    ++checked;
    const std::vector<int32_t> ids = tok.encode(c.text);
    bool ids_ok = ids == c.ids;
    if (!ids_ok && tie && tie(ids, c)) {
      ids_ok = true;
      ++ties;
    }
    const bool text_ok = !check_decode || tok.decode(c.ids) == c.decoded;
    if (ids_ok && text_ok) continue;
    if (++wrong <= 5) {
      ADD_FAILURE() << c.kind << " " << json(c.text).dump() << "\n  tessel:    " << show(ids)
                    << "\n  reference: " << show(c.ids)
                    << "\n  decoded:   " << json(tok.decode(c.ids)).dump()
                    << "\n  expected:  " << json(c.decoded).dump();
    }
  }
  EXPECT_EQ(wrong, 0u) << "of " << checked << " cases";
  EXPECT_GE(checked, 2000u);
  EXPECT_LE(ties * 100, checked) << ties << " ties";
}

// Streaming the ids gives decode()'s text, in pieces that are each well-formed UTF-8.
void expect_stream_equals_decode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamDecoder stream(tok);
  std::string streamed;
  for (const int32_t id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << json(piece).dump();
    streamed += piece;
  }
  const std::string rest = stream.finish();
  EXPECT_TRUE(is_valid_utf8(rest));
  streamed += rest;
  EXPECT_EQ(streamed, tok.decode(ids)) << show(ids);
}

class SentencePieceReference : public testing::TestWithParam<std::string> {};

TEST_P(SentencePieceReference, IdsAndTextEqualTheLibrary) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const Recorded& r = ref.models.at(GetParam());
  const Tokenizer tok = Tokenizer::from_sentencepiece((ref.dir / (GetParam() + ".model")).string());
  EXPECT_EQ(tok.vocab_size(), r.vocab_size);
  expect_matches(tok, r.cases, true);
}

TEST_P(SentencePieceReference, ArbitraryIdSequencesDecodeAsTheLibrary) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const Recorded& r = ref.models.at(GetParam());
  const Tokenizer tok = Tokenizer::from_sentencepiece((ref.dir / (GetParam() + ".model")).string());
  size_t wrong = 0;
  for (const Decode& d : r.decodes) {
    const std::string text = tok.decode(d.ids);
    if (text != d.text && ++wrong <= 5) {
      ADD_FAILURE() << show(d.ids) << "\n  tessel:    " << json(text).dump()
                    << "\n  reference: " << json(d.text).dump();
    }
    expect_stream_equals_decode(tok, d.ids);
  }
  EXPECT_EQ(wrong, 0u) << "of " << r.decodes.size();
  EXPECT_GE(r.decodes.size(), 100u);
}

TEST_P(SentencePieceReference, StreamingEqualsWholeDecodeOnRandomIds) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const Tokenizer tok = Tokenizer::from_sentencepiece((ref.dir / (GetParam() + ".model")).string());
  std::mt19937 gen(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> ids(gen() % 40);
    for (int32_t& id : ids) id = int32_t(gen() % tok.vocab_size());
    expect_stream_equals_decode(tok, ids);
  }
  for (const Case& c : reference().models.at(GetParam()).cases) {
    expect_stream_equals_decode(tok, c.ids);
  }
}

// The tokenizer.ggml.* keys llama.cpp's converter writes for a tokenizer.model, built here from
// the parsed file rather than by tessel's writer, then serialized and parsed as a file.
GgufMetadata converter_keys(const SentencePieceModel& sp) {
  using Type = SentencePieceModel::PieceType;
  const bool unigram = sp.model_type == SentencePieceModel::ModelType::kUnigram;
  GgufMetadata m;
  m.set("general.architecture", GgufValue::of_string(unigram ? "t5" : "llama"));
  m.set("tokenizer.ggml.model", GgufValue::of_string(unigram ? "t5" : "llama"));
  if (unigram) m.set("tokenizer.ggml.pre", GgufValue::of_string("default"));
  std::vector<std::string> tokens;
  std::vector<GgufValue> scores, types;
  for (size_t i = 0; i < sp.pieces.size(); ++i) {
    const auto& p = sp.pieces[i];
    tokens.push_back(p.piece);
    scores.push_back(GgufValue::of_float(GgufType::F32, p.score));
    types.push_back(GgufValue::of_int(GgufType::I32, int32_t(p.type)));
    if (p.type == Type::kUnknown)
      m.set("tokenizer.ggml.unknown_token_id", GgufValue::of_u32(uint32_t(i)));
    if (p.piece == sp.bos_piece) m.set("tokenizer.ggml.bos_token_id", GgufValue::of_u32(i));
    if (p.piece == sp.eos_piece) m.set("tokenizer.ggml.eos_token_id", GgufValue::of_u32(i));
  }
  m.set("tokenizer.ggml.tokens", GgufValue::of_strings(tokens));
  m.set("tokenizer.ggml.scores", GgufValue::of_array(GgufType::F32, std::move(scores)));
  m.set("tokenizer.ggml.token_type", GgufValue::of_array(GgufType::I32, std::move(types)));
  m.set("tokenizer.ggml.add_space_prefix", GgufValue::of_bool(sp.normalizer.add_dummy_prefix));
  m.set("tokenizer.ggml.remove_extra_whitespaces",
        GgufValue::of_bool(sp.normalizer.remove_extra_whitespaces));
  if (unigram && !sp.normalizer.precompiled_charsmap.empty()) {
    std::vector<GgufValue> bytes;
    for (const char c : sp.normalizer.precompiled_charsmap)
      bytes.push_back(GgufValue::of(GgufType::U8, uint8_t(c)));
    m.set("tokenizer.ggml.precompiled_charsmap",
          GgufValue::of_array(GgufType::U8, std::move(bytes)));
  }
  return m;
}

GgufMetadata through_file(const GgufMetadata& m) {
  const std::vector<uint8_t> bytes = serialize_gguf(m, {});
  return parse_gguf(bytes.data(), bytes.size(), "model.gguf").metadata;
}

TEST_P(SentencePieceReference, ThroughGgufEqualsTheLibrary) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const Recorded& r = ref.models.at(GetParam());
  const std::string path = (ref.dir / (GetParam() + ".model")).string();
  const SentencePieceModel sp = read_sentencepiece_model(path);
  EXPECT_EQ(GetParam() == "unigram", !sp.normalizer.precompiled_charsmap.empty());
  const Tokenizer tok = Tokenizer::from_gguf(through_file(converter_keys(sp)), "model.gguf");
  EXPECT_EQ(tok.vocab_size(), r.vocab_size);
  expect_matches(tok, r.cases, true);
  for (const Decode& d : r.decodes) EXPECT_EQ(tok.decode(d.ids), d.text) << show(d.ids);

  // read -> write -> read: tessel writes what it read, key for key, from the GGUF tokenizer and
  // from the .model file alike.
  GgufMetadata from_gguf, from_model, again;
  tok.to_gguf(from_gguf);
  Tokenizer::from_sentencepiece(path).to_gguf(from_model);
  Tokenizer::from_gguf(through_file(from_gguf), "again.gguf").to_gguf(again);
  for (const auto& [key, value] : from_gguf.entries()) {
    if (key.starts_with("tokenizer.ggml.add_")) continue;  // BOS / EOS defaults differ by source
    const GgufValue* other = from_model.find(key);
    EXPECT_TRUE(other && *other == value) << key;
  }
  EXPECT_EQ(again.entries(), from_gguf.entries());
}

INSTANTIATE_TEST_SUITE_P(Models, SentencePieceReference,
                         testing::Values("bpe", "unigram", "unigram_bf"));

// The Llama 2 layout converted from bpe.model: the same ids, and (its decoder differs from the
// library's only on control and unknown pieces, which encoding never yields here) the same text.
TEST(SentencePieceJson, Llama2LayoutEqualsTheModel) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const Tokenizer tok = Tokenizer::load((ref.dir / "llama2_bpe").string());
  const Recorded& r = ref.models.at("bpe");
  EXPECT_EQ(tok.vocab_size(), r.vocab_size);
  expect_matches(tok, r.cases, true);
  std::mt19937 gen(5);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> ids(gen() % 40);
    for (int32_t& id : ids) id = int32_t(gen() % tok.vocab_size());
    expect_stream_equals_decode(tok, ids);
  }
}

// A Unigram tokenizer.json converted from unigram_bf.model. Two documented differences of
// Hugging Face's Unigram: it can match every vocabulary entry in text, control pieces and <0xNN>
// included, which SentencePiece never does (strings that spell one are left out); and it keeps
// path scores in f64 where SentencePiece stores them as float, so an exact tie between two
// segmentations ("!" + "!!" against "!!" + "!") can break the other way. Such a difference is
// accepted only when both segmentations spell the same text with the same total score.
TEST(SentencePieceJson, UnigramEqualsTheModel) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const Tokenizer tok = Tokenizer::load((ref.dir / "unigram_json").string());
  const json vocab =
      json::parse(read_file(ref.dir / "unigram_json" / "tokenizer.json")).at("model").at("vocab");
  const auto spells_control = [&](const Case& c) {
    for (const char* s : {"<s>", "</s>", "<unk>", "<0x"}) {
      if (c.text.find(s) != std::string::npos) return true;
    }
    return false;
  };
  const auto score = [&](const std::vector<int32_t>& ids) {
    double sum = 0;
    for (int32_t id : ids) sum += vocab.at(size_t(id)).at(1).get<double>();
    return sum;
  };
  const auto tie = [&](const std::vector<int32_t>& ids, const Case& c) {
    return tok.decode_bytes(ids) == tok.decode_bytes(c.ids) && ids.size() == c.ids.size() &&
           std::abs(score(ids) - score(c.ids)) <= 1e-4;
  };
  expect_matches(tok, ref.models.at("unigram_bf").cases, true, spells_control, tie);
}

TEST(SentencePieceJson, ConfigAndDirectoryChoice) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const Tokenizer json_tok = Tokenizer::load((ref.dir / "llama2_bpe").string());
  const TokenizerSettings& s = json_tok.settings();
  EXPECT_EQ(s.bos_token, "<s>");
  EXPECT_EQ(s.eos_token, "</s>");
  EXPECT_EQ(s.pad_token, std::nullopt);
  EXPECT_TRUE(s.add_bos_token);
  EXPECT_FALSE(s.add_eos_token);
  EXPECT_EQ(s.model_max_length, std::nullopt);  // 1e30: no limit
  ASSERT_TRUE(s.chat_template);
  EXPECT_NE(s.chat_template->find("messages"), std::string::npos);
  std::vector<int32_t> want = {*json_tok.bos_token_id()};
  for (int32_t id : json_tok.encode("Hello world")) want.push_back(id);
  EXPECT_EQ(json_tok.encode_with_special_tokens("Hello world"), want);
  EXPECT_EQ(json_tok.special_token_id("<s>"), json_tok.bos_token_id());

  // A directory with tokenizer.model (and no tokenizer.json) loads the SentencePiece model.
  EXPECT_EQ(Tokenizer::files_in((ref.dir / "sp_dir").string()), "tokenizer.model");
  const Tokenizer sp_tok = Tokenizer::load((ref.dir / "sp_dir").string());
  EXPECT_EQ(sp_tok.settings().model_max_length, 4096);
  EXPECT_EQ(sp_tok.encode_with_special_tokens("Hello world"), want);
  std::vector<int32_t> split = sp_tok.encode("a");
  split.push_back(*sp_tok.eos_token_id());
  for (int32_t id : sp_tok.encode("b")) split.push_back(id);
  EXPECT_EQ(sp_tok.encode("a</s>b", true), split);  // each side encoded as a text of its own
  // Without a config: the .model's own bos/eos, and no BOS added (the library's default).
  const Tokenizer bare = Tokenizer::from_sentencepiece((ref.dir / "bpe.model").string());
  EXPECT_EQ(bare.settings().bos_token, "<s>");
  EXPECT_FALSE(bare.settings().add_bos_token);
  EXPECT_EQ(bare.encode_with_special_tokens("Hello world"), bare.encode("Hello world"));
}

void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << parts.front() << "'";
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message lacks '" << part << "': " << e.what();
    }
  }
}

TEST(SentencePieceFiles, TruncatedFilesAreClearErrors) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = tessel::test::scratch_path("tessel_sp_truncated");
  for (const std::string name : {"bpe", "unigram"}) {
    const std::string bytes = read_file(ref.dir / (name + ".model"));
    for (const size_t keep : {size_t{0}, size_t{1}, size_t{2}, size_t{100}, bytes.size() / 3,
                              bytes.size() / 2, bytes.size() - 300, bytes.size() - 1}) {
      SCOPED_TRACE(name + " cut to " + std::to_string(keep));
      const fs::path path = dir / (name + "_" + std::to_string(keep) + ".model");
      write_file(path, bytes.substr(0, keep));
      expect_error([&] { Tokenizer::from_sentencepiece(path.string()); },
                   {"tokenizer: " + path.string()});
      expect_error([&] { Tokenizer::load(path.string()); }, {path.string()});
    }
  }
  const std::string text = read_file(ref.dir / "llama2_bpe" / "tokenizer.json");
  for (const size_t keep : {size_t{0}, size_t{10}, text.size() / 2, text.size() - 1}) {
    const fs::path path = dir / ("cut_" + std::to_string(keep) + ".json");
    write_file(path, text.substr(0, keep));
    expect_error([&] { Tokenizer::load(path.string()); }, {path.string(), "is not valid JSON"});
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessel::io
