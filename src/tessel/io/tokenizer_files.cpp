// SPDX-License-Identifier: Apache-2.0
// Reading tokenizer files: vocab.json + merges.txt (GPT-2's encoder.json + vocab.bpe) and Hugging
// Face tokenizer.json. Everything is checked before use; errors name the file and the entry.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "tessel/core/error.h"
#include "tessel/io/gguf.h"
#include "tessel/io/pretokenize.h"
#include "tessel/io/tokenizer.h"
#include "tessel/io/tokenizer_json.h"

namespace tessel::io {
namespace detail {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "tokenizer: cannot open ", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  TESSEL_CHECK(!in.bad(), "tokenizer: error reading ", path);
  return buffer.str();
}

// Parses JSON, rejecting an object that repeats a key (the parser would silently keep the last).
json parse_json(const std::string& text, const std::string& path) {
  std::vector<std::unordered_set<std::string>> keys;
  std::string duplicate;
  auto check = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty()) {
      if (!keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, check);
  } catch (const json::exception& e) {
    TESSEL_FAIL("tokenizer: ", path, " is not valid JSON: ", e.what());
  }
  TESSEL_CHECK(duplicate.empty(), "tokenizer: ", path, ": key '", duplicate,
               "' appears twice in one object");
  return j;
}

// A token -> id object as a vector indexed by id; ids must be exactly 0..size-1.
std::vector<std::pair<std::string, std::string>> merges_from_json(const json& list,
                                                                  const std::string& where) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    const std::string entry = where + "[" + std::to_string(i) + "]";
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      TESSEL_CHECK(space != std::string::npos && space > 0 && space + 1 < s.size() &&
                       s.find(' ', space + 1) == std::string::npos,
                   entry, " '", s, "' must be two tokens separated by one space");
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      TESSEL_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), entry,
                   " ", m.dump(), " must be \"a b\" or [\"a\", \"b\"]");
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  return out;
}

std::vector<std::string> vocab_from_json(const json& object, const std::string& where) {
  TESSEL_CHECK(object.is_object(), where, " must be a JSON object of token -> id, got ",
               object.type_name());
  const size_t n = object.size();
  std::vector<std::string> vocab(n);
  std::vector<char> seen(n, 0);
  for (const auto& [token, value] : object.items()) {
    TESSEL_CHECK(value.is_number_integer(), where, ": token '", token, "' has id ", value.dump(),
                 ", expected an integer");
    const int64_t id = value.get<int64_t>();
    TESSEL_CHECK(id >= 0 && size_t(id) < n, where, ": token '", token, "' has id ", id,
                 ", out of range [0, ", n, ") (ids must be dense)");
    TESSEL_CHECK(!seen[id], where, ": id ", id, " is given to both '", vocab[id], "' and '", token,
                 "'");
    seen[id] = 1;
    vocab[id] = token;
  }
  return vocab;
}

const json* member(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

bool flag(const json& object, const char* key, bool fallback, const std::string& where) {
  const json* v = member(object, key);
  if (!v) return fallback;
  TESSEL_CHECK(v->is_boolean(), where, ".", key, " must be true or false, got ", v->dump());
  return v->get<bool>();
}

std::string type_of(const json& object, const std::string& where) {
  TESSEL_CHECK(object.is_object(), where, " must be an object, got ", object.dump());
  const json* t = member(object, "type");
  TESSEL_CHECK(t && t->is_string(), where, " has no \"type\"");
  return t->get<std::string>();
}

// The pre_tokenizer section: ByteLevel (GPT-2), or Sequence[Split(regex), ByteLevel without its
// own regex] (Llama 3).
static void read_pre_tokenizer(const json& pre, const std::string& where, TokenizerConfig& config) {
  const std::string type = type_of(pre, where);
  if (type == "ByteLevel") {
    config.add_prefix_space = flag(pre, "add_prefix_space", false, where);
    if (flag(pre, "use_regex", true, where)) config.pattern = kGpt2Pattern;
    return;
  }
  TESSEL_CHECK(type == "Sequence", where, ": pre-tokenizer '", type,
               "' is not supported (expected ByteLevel, or Sequence of Split and ByteLevel)");
  const json* list = member(pre, "pretokenizers");
  TESSEL_CHECK(list && list->is_array() && list->size() == 2, where,
               ".pretokenizers: expected [Split, ByteLevel]");
  const std::string split_where = where + ".pretokenizers[0]";
  TESSEL_CHECK(type_of((*list)[0], split_where) == "Split", split_where, " must be a Split");
  const json& split = (*list)[0];
  const json* behavior = member(split, "behavior");
  TESSEL_CHECK(behavior && *behavior == "Isolated", split_where, ".behavior ",
               behavior ? behavior->dump() : "null", " is not supported (expected \"Isolated\")");
  TESSEL_CHECK(!flag(split, "invert", false, split_where), split_where,
               ".invert = true is not supported");
  const json* pattern = member(split, "pattern");
  TESSEL_CHECK(pattern && pattern->is_object(), split_where, ".pattern must be an object");
  if (const json* regex = member(*pattern, "Regex"); regex && regex->is_string()) {
    config.pattern = regex->get<std::string>();
  } else if (const json* literal = member(*pattern, "String"); literal && literal->is_string()) {
    config.pattern = "\\Q" + literal->get<std::string>() + "\\E";
  } else {
    TESSEL_FAIL(split_where, ".pattern must hold \"Regex\" or \"String\", got ", pattern->dump());
  }
  const std::string byte_where = where + ".pretokenizers[1]";
  TESSEL_CHECK(type_of((*list)[1], byte_where) == "ByteLevel", byte_where, " must be ByteLevel");
  TESSEL_CHECK(!flag((*list)[1], "use_regex", true, byte_where), byte_where,
               ".use_regex must be false after a Split");
  config.add_prefix_space = flag((*list)[1], "add_prefix_space", false, byte_where);
}

static void read_model(const json& model, const std::string& where, TokenizerConfig& config) {
  TESSEL_CHECK(model.is_object(), where, " must be an object");
  if (const json* type = member(model, "type")) {
    TESSEL_CHECK(*type == "BPE", where, ".type ", type->dump(), " is not supported (expected BPE)");
  }
  if (const json* dropout = member(model, "dropout")) {
    TESSEL_CHECK(dropout->is_number() && dropout->get<double>() == 0.0, where, ".dropout ",
                 dropout->dump(), " is not supported (BPE dropout is a training-time option)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = member(model, key);
    TESSEL_CHECK(!v || *v == "", where, ".", key, " ", v ? v->dump() : "", " is not supported");
  }
  TESSEL_CHECK(!flag(model, "byte_fallback", false, where), where,
               ".byte_fallback = true is not supported (byte-level BPE needs no fallback)");
  config.ignore_merges = flag(model, "ignore_merges", false, where);
  const json* vocab = member(model, "vocab");
  TESSEL_CHECK(vocab, where, " has no vocab");
  config.vocab = vocab_from_json(*vocab, where + ".vocab");
  const json* merges = member(model, "merges");
  TESSEL_CHECK(merges && merges->is_array(), where, ".merges must be an array");
  config.merges = merges_from_json(*merges, where + ".merges");
  config.describe_merge = [where](size_t i) {
    return where + ".merges[" + std::to_string(i) + "]";
  };
}

void read_added_tokens(const json& list, const std::string& where, std::vector<AddedToken>& out) {
  TESSEL_CHECK(list.is_array(), where, " must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string entry = where + "[" + std::to_string(i) + "]";
    TESSEL_CHECK(t.is_object(), entry, " must be an object");
    const json* id = member(t, "id");
    const json* content = member(t, "content");
    TESSEL_CHECK(id && id->is_number_integer(), entry, ".id must be an integer");
    TESSEL_CHECK(content && content->is_string(), entry, ".content must be a string");
    TESSEL_CHECK(!flag(t, "single_word", false, entry), entry, " ('", content->get<std::string>(),
                 "'): single_word = true is not supported");
    const int64_t value = id->get<int64_t>();
    TESSEL_CHECK(value >= 0 && value < INT32_MAX, entry, " ('", content->get<std::string>(),
                 "'): id ", value, " is out of range");
    out.push_back({int32_t(value), content->get<std::string>(), flag(t, "special", false, entry),
                   flag(t, "lstrip", false, entry), flag(t, "rstrip", false, entry)});
  }
}

}  // namespace detail

using namespace detail;

Tokenizer Tokenizer::from_vocab_merges(const std::string& vocab_path,
                                       const std::string& merges_path,
                                       std::optional<std::vector<std::string>> special_tokens) {
  TokenizerConfig config;
  config.source = vocab_path + " + " + merges_path;
  config.pattern = kGpt2Pattern;
  config.vocab =
      vocab_from_json(parse_json(read_text(vocab_path), vocab_path), "tokenizer: " + vocab_path);
  const std::string merges_text = read_text(merges_path);
  std::vector<size_t> lines;  // line number of each merge, for error messages
  size_t line_no = 0;
  for (size_t pos = 0; pos < merges_text.size();) {
    size_t end = merges_text.find('\n', pos);
    if (end == std::string::npos) end = merges_text.size();
    std::string_view line(merges_text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.starts_with("#version")) continue;
    // Byte-level tokens never contain white space, so any run of it separates the two parts.
    std::vector<std::string_view> parts;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      const size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
      if (i > start) parts.push_back(line.substr(start, i - start));
    }
    TESSEL_CHECK(parts.size() == 2, "tokenizer: ", merges_path, " line ", line_no, ": '", line,
                 "' must be two tokens separated by a space");
    config.merges.emplace_back(parts[0], parts[1]);
    lines.push_back(line_no);
  }
  config.describe_merge = [merges_path, lines](size_t i) {
    return merges_path + " line " + std::to_string(lines[i]);
  };
  // Which vocab tokens are special is not part of these files; GPT-2 has one.
  const bool defaults = !special_tokens;
  if (defaults) special_tokens = std::vector<std::string>{"<|endoftext|>"};
  for (const std::string& content : *special_tokens) {
    const auto it = std::find(config.vocab.begin(), config.vocab.end(), content);
    if (it == config.vocab.end() && defaults) continue;
    TESSEL_CHECK(it != config.vocab.end(), "tokenizer: special token '", content, "' is not in ",
                 vocab_path);
    config.added_tokens.push_back({int32_t(it - config.vocab.begin()), content, true});
  }
  return Tokenizer(std::move(config));
}

Tokenizer Tokenizer::from_tokenizer_json(const std::string& path) {
  const json root = parse_json(read_text(path), path);
  const std::string where = "tokenizer: " + path + ": ";
  TESSEL_CHECK(root.is_object(), where, "expected a JSON object at the top level");
  const json* model = member(root, "model");
  TESSEL_CHECK(model, where, "has no \"model\"");
  TESSEL_CHECK(model->is_object(), where, "model must be an object");
  const json* type = member(*model, "type");
  const std::string kind = type && type->is_string() ? type->get<std::string>() : "BPE";
  TESSEL_CHECK(kind == "BPE" || kind == "Unigram", where, "model.type ",
               type ? type->dump() : "null", " is not supported (supported: BPE, Unigram)");
  // BPE without a byte-level pre-tokenizer is the SentencePiece layout (Llama 2, Mistral).
  const json* pre = member(root, "pre_tokenizer");
  const bool sentencepiece =
      kind == "Unigram" || !pre || (pre->is_object() && pre->value("type", "") == "Metaspace");
  if (sentencepiece) {
    SentencePieceJson sp = read_sentencepiece_json(root, path);
    return from_model(path, std::move(sp.spelling), std::move(sp.added), std::move(sp.model),
                      std::move(sp.settings));
  }

  TokenizerConfig config;
  config.source = path;
  read_model(*model, where + "model", config);
  if (const json* normalizer = member(root, "normalizer")) {
    TESSEL_FAIL(where, "normalizer ", normalizer->dump(), " is not supported");
  }
  read_pre_tokenizer(*pre, where + "pre_tokenizer", config);
  if (const json* decoder = member(root, "decoder")) {
    const std::string dtype = type_of(*decoder, where + "decoder");
    TESSEL_CHECK(dtype == "ByteLevel", where, "decoder '", dtype,
                 "' is not supported (expected ByteLevel)");
  }
  TokenizerSettings settings;
  // Template tokens (e.g. a BOS) are added by encode_with_special_tokens, not by encode.
  settings_from_post_processor(member(root, "post_processor"), where + "post_processor", settings);
  if (const json* added = member(root, "added_tokens")) {
    read_added_tokens(*added, where + "added_tokens", config.added_tokens);
  }
  Tokenizer tok(std::move(config));
  tok.settings_ = std::make_shared<const TokenizerSettings>(std::move(settings));
  return tok;
}

std::optional<std::string> Tokenizer::files_in(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir(path);
  auto has = [&](const char* name) { return fs::is_regular_file(dir / name, ec); };
  if (has("tokenizer.json")) return "tokenizer.json";
  if (has("tokenizer.model")) return "tokenizer.model";
  if (has("vocab.json") && has("merges.txt")) return "vocab.json + merges.txt";
  if (has("encoder.json") && has("vocab.bpe")) return "encoder.json + vocab.bpe";
  return std::nullopt;
}

Tokenizer Tokenizer::with_config(const std::string& tokenizer_config_path) const {
  TokenizerSettings settings = *settings_;
  read_tokenizer_config(tokenizer_config_path, settings);
  for (const auto* name :
       {&settings.bos_token, &settings.eos_token, &settings.pad_token, &settings.unk_token}) {
    TESSEL_CHECK(!*name || token_id(**name), "tokenizer: ", tokenizer_config_path, ": token '",
                 **name, "' is not in the vocabulary");
  }
  Tokenizer tok = *this;
  tok.settings_ = std::make_shared<const TokenizerSettings>(std::move(settings));
  return tok;
}

namespace {

// A SentencePiece model file starts with field 1 (pieces), wire type 2: byte 0x0A; a JSON file
// with '{' after white space.
bool looks_like_sentencepiece(const std::string& path) {
  if (path.ends_with(".model")) return true;
  std::ifstream in(path, std::ios::binary);
  char first = 0, c = 0;
  if (!in.get(first)) return false;
  for (c = first; c == ' ' || c == '\n' || c == '\r' || c == '\t';) {
    if (!in.get(c)) return false;
  }
  return first == 0x0A && c != '{';
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  // A GGUF file carries its whole tokenizer in its metadata; no tokenizer_config.json applies.
  if (fs::is_regular_file(p, ec) && is_gguf_file(path))
    return from_gguf(GgufFile::open(path, GgufMapping::Windows).metadata(), path);
  Tokenizer tok;
  fs::path dir;
  if (fs::is_regular_file(p, ec)) {
    tok = looks_like_sentencepiece(path) ? from_sentencepiece(path) : from_tokenizer_json(path);
    dir = p.parent_path();
  } else {
    TESSEL_CHECK(fs::is_directory(p, ec), "tokenizer: ", path,
                 " is neither a file nor a directory");
    dir = p;
    const auto files = files_in(path);
    TESSEL_CHECK(files, "tokenizer: ", path,
                 " has no tokenizer.json, vocab.json + merges.txt, or encoder.json + vocab.bpe "
                 "(nor a SentencePiece tokenizer.model)");
    if (*files == "tokenizer.json") {
      tok = from_tokenizer_json((dir / "tokenizer.json").string());
    } else if (*files == "tokenizer.model") {
      tok = from_sentencepiece((dir / "tokenizer.model").string());
    } else if (*files == "vocab.json + merges.txt") {
      tok = from_vocab_merges((dir / "vocab.json").string(), (dir / "merges.txt").string());
    } else {
      tok = from_vocab_merges((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
    }
  }
  const fs::path config = (dir.empty() ? fs::path(".") : dir) / "tokenizer_config.json";
  if (fs::is_regular_file(config, ec)) return tok.with_config(config.string());
  return tok;
}

}  // namespace tessel::io
