// SPDX-License-Identifier: Apache-2.0
// Tokenizer files: vocab.json + merges.txt and tokenizer.json built from a small byte-level
// vocabulary load and agree with each other; every malformed file or entry is an Error that names
// the file and the entry.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/tokenizer_test_util.h"

namespace tessel::io {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json small_vocab_json() {
  const TokenizerConfig c = small_config();
  json v = json::object();
  for (size_t id = 0; id < c.vocab.size(); ++id) v[c.vocab[id]] = id;
  return v;
}

std::string small_merges_txt() {
  std::string text = "#version: 0.2\n";
  for (const auto& [a, b] : small_config().merges) text += a + " " + b + "\n";
  return text;
}

json small_tokenizer_json(bool pair_merges) {
  json merges = json::array();
  for (const auto& [a, b] : small_config().merges) {
    merges.push_back(pair_merges ? json::array({a, b}) : json(a + " " + b));
  }
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 262},
             {"content", "<|endoftext|>"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", true},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"post_processor", {{"type", "ByteLevel"}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", small_vocab_json()},
            {"merges", merges}}}};
}

const std::vector<std::string> kSamples = {
    "the end", " the", "in a tin", "the!", "x<|endoftext|>y", "\u00e9t\u00e9 \U0001F600", "  \n\t"};

TEST(TokenizerFiles, AllLayoutsAgree) {
  const fs::path dir = temp_dir("layouts");
  const Tokenizer direct(small_config());
  const Tokenizer from_txt =
      Tokenizer::from_vocab_merges(write_file(dir / "vocab.json", small_vocab_json().dump()),
                                   write_file(dir / "merges.txt", small_merges_txt()));
  const Tokenizer from_legacy = Tokenizer::from_tokenizer_json(
      write_file(dir / "legacy.json", small_tokenizer_json(false).dump()));
  const Tokenizer from_pairs = Tokenizer::from_tokenizer_json(
      write_file(dir / "pairs.json", small_tokenizer_json(true).dump()));
  for (const std::string& s : kSamples) {
    EXPECT_EQ(from_txt.encode(s), direct.encode(s)) << s;
    EXPECT_EQ(from_legacy.encode(s), direct.encode(s)) << s;
    EXPECT_EQ(from_pairs.encode(s), direct.encode(s)) << s;
  }
  EXPECT_EQ(from_pairs.encode("x<|endoftext|>y", true)[1], 262);
  EXPECT_EQ(from_txt.special_token_id("<|endoftext|>"), std::nullopt);  // not in this vocab
  // A directory is searched for the known names.
  EXPECT_EQ(Tokenizer::load(dir.string()).encode("the end"), direct.encode("the end"));
  fs::rename(dir / "legacy.json", dir / "tokenizer.json");
  EXPECT_EQ(Tokenizer::load(dir.string()).encode("x<|endoftext|>y", true),
            from_pairs.encode("x<|endoftext|>y", true));
}

TEST(TokenizerFiles, SplitPreTokenizerAndIgnoreMerges) {
  const fs::path dir = temp_dir("split");
  json tj = small_tokenizer_json(true);
  tj["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", kGpt2Pattern}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const Tokenizer split = Tokenizer::from_tokenizer_json(write_file(dir / "split.json", tj.dump()));
  const Tokenizer direct(small_config());
  for (const std::string& s : kSamples) EXPECT_EQ(split.encode(s), direct.encode(s)) << s;

  tj["model"]["merges"] = json::array();
  tj["model"]["ignore_merges"] = true;
  const Tokenizer whole = Tokenizer::from_tokenizer_json(write_file(dir / "whole.json", tj.dump()));
  EXPECT_EQ(whole.encode(" the"), (std::vector<int32_t>{*whole.token_id("\u0120the")}));
  EXPECT_EQ(whole.encode(" then").size(), 5u);  // no merges for what is not a whole token
}

struct BadCase {
  std::string name;
  std::function<void(json&)> edit;
  std::vector<std::string> message;
};

TEST(TokenizerFiles, MalformedTokenizerJsonNamesTheEntry) {
  const fs::path dir = temp_dir("bad_json");
  const std::vector<BadCase> cases = {
      {"no_model", [](json& j) { j.erase("model"); }, {"has no \"model\""}},
      {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "WordPiece"}},
      {"one_part", [](json& j) { j["model"]["merges"][3] = "he"; }, {"model.merges[3] 'he'"}},
      {"three_parts",
       [](json& j) {
         j["model"]["merges"][4] = {"i", "n", "x"};
       },
       {"model.merges[4]", "[\"i\",\"n\",\"x\"]"}},
      {"unknown_part",
       [](json& j) {
         j["model"]["merges"][2] = {"h", "zz"};
       },
       {"model.merges[2] 'h zz'", "'zz' is not in the vocabulary"}},
      {"merged_missing",
       [](json& j) {
         j["model"]["merges"][5] = {"a", "a"};
       },
       {"model.merges[5] 'a a'", "merged token 'aa' is not in the vocabulary"}},
      {"id_out_of_range",
       [](json& j) { j["model"]["vocab"]["in"] = 999; },
       {"model.vocab", "token 'in' has id 999, out of range [0, 262)"}},
      {"id_not_integer",
       [](json& j) { j["model"]["vocab"]["in"] = "260"; },
       {"model.vocab", "token 'in' has id \"260\""}},
      {"duplicate_id",
       [](json& j) { j["model"]["vocab"]["in"] = 259; },
       {"model.vocab", "id 259 is given to both"}},
      {"normalizer",
       [](json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       {"normalizer"}},
      {"pre_tokenizer",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       {"pre-tokenizer 'Whitespace' is not supported"}},
      {"bad_regex",
       [](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}},
               {{"type", "ByteLevel"}, {"use_regex", false}}}}};
       },
       {"pretokenize: cannot compile pattern '(a'"}},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout 0.1"}},
      {"byte_fallback",
       [](json& j) { j["model"]["byte_fallback"] = true; },
       {"model.byte_fallback"}},
      {"decoder",
       [](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       {"decoder 'WordPiece'"}},
      {"single_word",
       [](json& j) { j["added_tokens"][0]["single_word"] = true; },
       {"added_tokens[0] ('<|endoftext|>'): single_word"}},
      {"added_conflict",
       [](json& j) { j["added_tokens"][0]["id"] = 100; },
       {"added token '<|endoftext|>' has id 100, which the vocabulary gives to 'd'"}},
      {"added_hole",
       [](json& j) { j["added_tokens"][0]["id"] = 270; },
       {"added token '<|endoftext|>' has id 270, out of range [0, 263)"}},
      {"added_twice",
       [](json& j) {
         j["added_tokens"].push_back(j["added_tokens"][0]);
         j["added_tokens"][1]["id"] = 263;
       },
       {"added token '<|endoftext|>' is listed twice"}},
      {"hole_in_ids",
       [](json& j) { j["model"]["vocab"].erase("\u0120"); },
       {"model.vocab", "out of range"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    json j = small_tokenizer_json(c.name.size() % 2 == 0);  // both merge syntaxes get used
    c.edit(j);
    const std::string path = write_file(dir / (c.name + ".json"), j.dump());
    std::vector<std::string> parts = c.message;
    parts.push_back(path);
    expect_error([&] { Tokenizer::from_tokenizer_json(path); }, parts);
  }
}

TEST(TokenizerFiles, MalformedVocabAndMergesNameTheFileAndLine) {
  const fs::path dir = temp_dir("bad_txt");
  const std::string good_vocab = write_file(dir / "vocab.json", small_vocab_json().dump());
  const std::string good_merges = write_file(dir / "merges.txt", small_merges_txt());
  auto vocab_error = [&](const std::string& name, const std::string& text,
                         std::vector<std::string> parts) {
    SCOPED_TRACE(name);
    const std::string path = write_file(dir / name, text);
    parts.push_back(path);
    expect_error([&] { Tokenizer::from_vocab_merges(path, good_merges); }, parts);
  };
  vocab_error("truncated.json", small_vocab_json().dump().substr(0, 999), {"is not valid JSON"});
  vocab_error("array.json", "[1, 2]", {"must be a JSON object of token -> id"});
  vocab_error("dup_key.json", "{\"a\": 0, \"b\": 1, \"a\": 2}", {"key 'a' appears twice"});
  vocab_error("negative.json", "{\"a\": -1}", {"token 'a' has id -1, out of range [0, 1)"});
  std::string no_byte = small_vocab_json().dump();
  json v = small_vocab_json();
  v.erase("!");
  for (auto& [k, id] : v.items()) {
    if (id.get<int>() > '!') id = id.get<int>() - 1;
  }
  vocab_error("no_byte.json", v.dump(), {"the vocabulary has no token for byte 33 ('!')"});

  auto merges_error = [&](const std::string& name, const std::string& text,
                          std::vector<std::string> parts) {
    SCOPED_TRACE(name);
    const std::string path = write_file(dir / name, text);
    parts.push_back(path);
    expect_error([&] { Tokenizer::from_vocab_merges(good_vocab, path); }, parts);
  };
  const std::string g = spell(' ');
  merges_error("three.txt", "#version: 0.2\ne !\n" + g + " t x\n",
               {"line 3: '" + g + " t x' must be two tokens"});
  merges_error("one.txt", "#version: 0.2\ne\n", {"line 2: 'e' must be two tokens"});
  merges_error("unknown.txt", "#version: 0.2\ne !\n\nh q\xC3\xA9\n",
               {"line 4 'h q\xC3\xA9': 'q\xC3\xA9' is not in the vocabulary"});
  merges_error("merged.txt", "#version: 0.2\nq q\n",
               {"line 2 'q q': the merged token 'qq' is not in the vocabulary"});
  expect_error([&] { Tokenizer::from_vocab_merges((dir / "absent.json").string(), good_merges); },
               {"tokenizer: cannot open", "absent.json"});
  expect_error(
      [&] {
        Tokenizer::from_vocab_merges(good_vocab, good_merges, std::vector<std::string>{"<s>"});
      },
      {"special token '<s>' is not in", good_vocab});
  // Windows line endings and a missing final newline are fine.
  std::string crlf = small_merges_txt();
  for (size_t p = crlf.find('\n'); p != std::string::npos; p = crlf.find('\n', p + 2)) {
    crlf.replace(p, 1, "\r\n");
  }
  crlf.pop_back();
  crlf.pop_back();
  const Tokenizer tok =
      Tokenizer::from_vocab_merges(good_vocab, write_file(dir / "crlf.txt", crlf));
  EXPECT_EQ(tok.encode(" a the"), Tokenizer(small_config()).encode(" a the"));
}

TEST(TokenizerFiles, LoadNamesWhatItLookedFor) {
  const fs::path dir = temp_dir("empty");
  expect_error([&] { Tokenizer::load(dir.string()); },
               {dir.string(), "has no tokenizer.json, vocab.json + merges.txt, or encoder.json"});
  expect_error([&] { Tokenizer::load((dir / "nothing").string()); },
               {"is neither a file nor a directory"});
}

TEST(TokenizerFiles, ConfigValidation) {
  auto bad = [](const std::function<void(TokenizerConfig&)>& edit, std::vector<std::string> parts) {
    TokenizerConfig c = small_config();
    edit(c);
    parts.push_back("small test vocabulary");
    expect_error([&] { Tokenizer t(std::move(c)); }, parts);
  };
  bad([](TokenizerConfig& c) { c.vocab.clear(); }, {"the vocabulary is empty"});
  bad([](TokenizerConfig& c) { c.vocab[261] = "in"; },
      {"token 'in' appears twice, with ids 260 and 261"});
  bad(
      [](TokenizerConfig& c) {
        c.added_tokens = {{300, "<x>", true}};
      },
      {"added token '<x>' has id 300, out of range [0, 263)"});
  bad([](TokenizerConfig& c) { c.added_tokens = {{5, "", true}}; }, {"empty content"});
  bad(
      [](TokenizerConfig& c) {
        c.added_tokens = {{262, "<x>", true}, {262, "<y>", true}};
      },
      {"added tokens '<x>' and '<y>' share id 262"});
  bad(
      [](TokenizerConfig& c) {
        c.describe_merge = [](size_t i) { return "entry #" + std::to_string(i); };
        c.merges[1].second = "zz";
      },
      {"entry #1 '", "'zz' is not in the vocabulary"});
}

}  // namespace
}  // namespace tessel::io
