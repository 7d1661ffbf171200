// SPDX-License-Identifier: Apache-2.0
// Tokenizers to and from GGUF metadata (the tokenizer.ggml.* keys). A GGUF file carries its
// tokenizer inline: "gpt2" is a byte-level BPE (tokens in byte-level spelling plus "a b" merges),
// "llama" is a SentencePiece BPE (tokens with scores and piece types, <0xNN> byte pieces for byte
// fallback). Both are built with the same classes as the files a model directory has, so a GGUF
// model encodes exactly as its source directory did.
#include <algorithm>

#include "tessel/core/error.h"
#include "tessel/io/gguf.h"
#include "tessel/io/pretokenize.h"
#include "tessel/io/sentencepiece_model.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {

namespace {

constexpr const char* kModel = "tokenizer.ggml.model";
constexpr const char* kPre = "tokenizer.ggml.pre";
constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kScores = "tokenizer.ggml.scores";
constexpr const char* kTypes = "tokenizer.ggml.token_type";
constexpr const char* kMerges = "tokenizer.ggml.merges";
constexpr const char* kBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kPad = "tokenizer.ggml.padding_token_id";
constexpr const char* kUnk = "tokenizer.ggml.unknown_token_id";
constexpr const char* kAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kSpacePrefix = "tokenizer.ggml.add_space_prefix";
constexpr const char* kExtraSpaces = "tokenizer.ggml.remove_extra_whitespaces";
constexpr const char* kChatTemplate = "tokenizer.chat_template";

// GGUF token types; the same numbers as SentencePiece's piece types.
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kByte = 6;

std::vector<std::string> strings(const GgufMetadata& m, const char* key, const std::string& what) {
  std::vector<std::string> out;
  const std::string name = what + ": " + key;
  for (const GgufValue& v : m.at(key, what).as_array(name)) out.push_back(v.as_string(name));
  return out;
}

// The array under `key` when present: one entry per token, each checked by `get`.
template <typename T, typename Get>
std::vector<T> per_token(const GgufMetadata& m, const char* key, size_t n, const std::string& what,
                         Get get) {
  std::vector<T> out;
  const GgufValue* v = m.find(key);
  if (!v) return out;
  const std::string name = what + ": " + key;
  const auto& items = v->as_array(name);
  TESSEL_CHECK(items.size() == n, name, " has ", items.size(), " entries for ", n, " tokens");
  for (const GgufValue& item : items) out.push_back(get(item, name));
  return out;
}

std::optional<int32_t> token_id(const GgufMetadata& m, const char* key, size_t n,
                                const std::string& what) {
  const GgufValue* v = m.find(key);
  if (!v) return std::nullopt;
  const int64_t id = v->as_int(what + ": " + key);
  TESSEL_CHECK(id >= 0 && uint64_t(id) < n, what, ": ", key, " = ", id,
               " is not a token id (the vocabulary has ", n, ")");
  return int32_t(id);
}

bool flag(const GgufMetadata& m, const char* key, bool fallback, const std::string& what) {
  const GgufValue* v = m.find(key);
  return v ? v->as_bool(what + ": " + key) : fallback;
}

void settings_from(const GgufMetadata& m, const std::vector<std::string>& tokens,
                   const std::string& what, TokenizerSettings& s) {
  auto name = [&](const char* key) -> std::optional<std::string> {
    if (auto id = token_id(m, key, tokens.size(), what)) return tokens[size_t(*id)];
    return std::nullopt;
  };
  s.source = what;
  if (auto t = name(kBos)) s.bos_token = t;
  if (auto t = name(kEos)) s.eos_token = t;
  if (auto t = name(kPad)) s.pad_token = t;
  if (auto t = name(kUnk)) s.unk_token = t;
  s.add_bos_token = flag(m, kAddBos, s.add_bos_token, what);
  s.add_eos_token = flag(m, kAddEos, s.add_eos_token, what);
  if (const GgufValue* t = m.find(kChatTemplate))
    s.chat_template = t->as_string(what + ": " + kChatTemplate);
}

std::vector<int32_t> token_types(const GgufMetadata& m, size_t n, const std::string& what) {
  return per_token<int32_t>(m, kTypes, n, what, [](const GgufValue& v, const std::string& name) {
    const int64_t t = v.as_int(name);
    TESSEL_CHECK(t >= 1 && t <= 6, name, ": token type ", t,
                 " is not one of 1 (normal) .. 6 (byte)");
    return int32_t(t);
  });
}

void set_id(GgufMetadata& out, const char* key, std::optional<int32_t> id) {
  if (id) out.set(key, GgufValue::of_u32(uint32_t(*id)));
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufMetadata& m, const std::string& what) {
  const std::string model = m.at(kModel, what).as_string(what + ": " + kModel);
  std::vector<std::string> tokens = strings(m, kTokens, what);
  TESSEL_CHECK(!tokens.empty(), what, ": ", kTokens, " is empty");
  const std::vector<int32_t> types = token_types(m, tokens.size(), what);
  TokenizerSettings settings;
  settings_from(m, tokens, what, settings);

  if (model == "llama") {
    SentencePieceModel sp;
    sp.source = what;
    sp.model_type = SentencePieceModel::ModelType::kBpe;
    const std::vector<float> scores = per_token<float>(
        m, kScores, tokens.size(), what,
        [](const GgufValue& v, const std::string& name) { return float(v.as_double(name)); });
    for (size_t i = 0; i < tokens.size(); ++i) {
      SentencePieceModel::Piece p;
      p.piece = tokens[i];
      p.score = scores.empty() ? 0.0f : scores[i];
      p.type = SentencePieceModel::PieceType(types.empty() ? kNormal : types[i]);
      sp.byte_fallback |= p.type == SentencePieceModel::PieceType::kByte;
      sp.pieces.push_back(std::move(p));
    }
    // Llama's SentencePiece settings unless the file says otherwise: no character map, a space
    // before the text, runs of spaces kept.
    sp.normalizer.name = "identity";
    sp.normalizer.present = true;
    sp.normalizer.add_dummy_prefix = flag(m, kSpacePrefix, true, what);
    sp.normalizer.remove_extra_whitespaces = flag(m, kExtraSpaces, false, what);
    if (settings.unk_token) sp.unk_piece = *settings.unk_token;
    if (settings.bos_token) sp.bos_piece = *settings.bos_token;
    if (settings.eos_token) sp.eos_piece = *settings.eos_token;
    if (settings.pad_token) sp.pad_piece = *settings.pad_token;
    Tokenizer tok = from_sentencepiece_model(std::move(sp));
    tok.settings_ = std::make_shared<const TokenizerSettings>(std::move(settings));
    return tok;
  }

  TESSEL_CHECK(model == "gpt2", what, ": ", kModel, " '", model,
               "' is not supported (gpt2: byte-level BPE, llama: SentencePiece)");
  TokenizerConfig config;
  config.source = what;
  const GgufValue* pre = m.find(kPre);
  const std::string pre_name = pre ? pre->as_string(what + ": " + kPre) : "gpt-2";
  TESSEL_CHECK(pre_name == "gpt-2" || pre_name == "default", what, ": ", kPre, " '", pre_name,
               "' is not supported yet (gpt-2 is)");
  config.pattern = kGpt2Pattern;
  const std::vector<std::string> merges = strings(m, kMerges, what);
  for (size_t i = 0; i < merges.size(); ++i) {
    const size_t space = merges[i].find(' ');
    TESSEL_CHECK(space != std::string::npos && space > 0 && space + 1 < merges[i].size() &&
                     merges[i].find(' ', space + 1) == std::string::npos,
                 what, ": ", kMerges, "[", i, "] '", merges[i],
                 "' must be two tokens separated by one space");
    config.merges.emplace_back(merges[i].substr(0, space), merges[i].substr(space + 1));
  }
  config.describe_merge = [what](size_t i) {
    return what + " " + kMerges + "[" + std::to_string(i) + "]";
  };
  for (size_t i = 0; i < tokens.size(); ++i) {
    // Control tokens are special (matched in text only when allowed); user-defined ones are
    // matched whole always. Without types, GPT-2's one special token.
    const int32_t type =
        types.empty() ? (tokens[i] == "<|endoftext|>" ? kControl : kNormal) : types[i];
    if (type == kControl || type == kUserDefined)
      config.added_tokens.push_back({int32_t(i), tokens[i], type == kControl});
  }
  config.vocab = std::move(tokens);
  Tokenizer tok(std::move(config));
  tok.settings_ = std::make_shared<const TokenizerSettings>(std::move(settings));
  return tok;
}

void Tokenizer::to_gguf(GgufMetadata& out) const {
  const TokenizerSettings& s = settings();
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < vocab_size(); ++i) tokens.push_back(token(int32_t(i)));
  std::vector<GgufValue> types;
  if (const SentencePieceModel* sp = sentencepiece_model()) {
    TESSEL_CHECK(sp->model_type == SentencePieceModel::ModelType::kBpe, "tokenizer ", sp->source,
                 ": a SentencePiece unigram model has no GGUF 'llama' form (BPE only)");
    out.set(kModel, GgufValue::of_string("llama"));
    out.set(kTokens, GgufValue::of_strings(tokens));
    std::vector<GgufValue> scores;
    for (const auto& p : sp->pieces) {
      scores.push_back(GgufValue::of_float(GgufType::F32, p.score));
      types.push_back(GgufValue::of_int(GgufType::I32, int32_t(p.type)));
    }
    out.set(kScores, GgufValue::of_array(GgufType::F32, std::move(scores)));
    out.set(kTypes, GgufValue::of_array(GgufType::I32, std::move(types)));
    out.set(kSpacePrefix, GgufValue::of_bool(sp->normalizer.add_dummy_prefix));
    out.set(kExtraSpaces, GgufValue::of_bool(sp->normalizer.remove_extra_whitespaces));
    set_id(out, kUnk, s.unk_token ? token_id(*s.unk_token) : std::nullopt);
  } else {
    const std::optional<std::string> pattern = pretokenizer_pattern();
    TESSEL_CHECK(pattern && *pattern == kGpt2Pattern && !bpe_merges().empty(),
                 "this tokenizer has no GGUF form yet (GGUF export takes GPT-2's byte-level BPE "
                 "and SentencePiece BPE models)");
    out.set(kModel, GgufValue::of_string("gpt2"));
    out.set(kPre, GgufValue::of_string("gpt-2"));
    out.set(kTokens, GgufValue::of_strings(tokens));
    for (size_t i = 0; i < tokens.size(); ++i) {
      int32_t type = kNormal;
      for (const AddedToken& a : added_tokens())
        if (a.id == int32_t(i)) type = a.special ? kControl : kUserDefined;
      types.push_back(GgufValue::of_int(GgufType::I32, type));
    }
    out.set(kTypes, GgufValue::of_array(GgufType::I32, std::move(types)));
    std::vector<std::string> merges;
    for (const auto& [a, b] : bpe_merges()) merges.push_back(a + " " + b);
    out.set(kMerges, GgufValue::of_strings(merges));
  }
  set_id(out, kBos, bos_token_id());
  set_id(out, kEos, eos_token_id());
  set_id(out, kPad, pad_token_id());
  out.set(kAddBos, GgufValue::of_bool(s.add_bos_token));
  out.set(kAddEos, GgufValue::of_bool(s.add_eos_token));
  if (s.chat_template) out.set(kChatTemplate, GgufValue::of_string(*s.chat_template));
}

}  // namespace tessel::io
