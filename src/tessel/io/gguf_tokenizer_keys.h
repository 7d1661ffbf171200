// SPDX-License-Identifier: Apache-2.0
// Internal to io: the tokenizer.ggml.* keys of GGUF metadata (names as llama.cpp's gguf-py writes
// them) and checked readers for them, shared by the byte-level BPE and SentencePiece halves of
// the GGUF tokenizer code.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/io/gguf.h"
#include "tessel/io/sentencepiece_model.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io::detail::gguf_keys {

inline constexpr const char* kModel = "tokenizer.ggml.model";
inline constexpr const char* kPre = "tokenizer.ggml.pre";
inline constexpr const char* kTokens = "tokenizer.ggml.tokens";
inline constexpr const char* kScores = "tokenizer.ggml.scores";
inline constexpr const char* kTypes = "tokenizer.ggml.token_type";
inline constexpr const char* kMerges = "tokenizer.ggml.merges";
inline constexpr const char* kBos = "tokenizer.ggml.bos_token_id";
inline constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
inline constexpr const char* kPad = "tokenizer.ggml.padding_token_id";
inline constexpr const char* kUnk = "tokenizer.ggml.unknown_token_id";
inline constexpr const char* kAddBos = "tokenizer.ggml.add_bos_token";
inline constexpr const char* kAddEos = "tokenizer.ggml.add_eos_token";
inline constexpr const char* kSpacePrefix = "tokenizer.ggml.add_space_prefix";
inline constexpr const char* kExtraSpaces = "tokenizer.ggml.remove_extra_whitespaces";
inline constexpr const char* kCharsMap = "tokenizer.ggml.precompiled_charsmap";
inline constexpr const char* kChatTemplate = "tokenizer.chat_template";

// GGUF token types; the same numbers as SentencePiece's piece types.
inline constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kByte = 6;

inline std::vector<std::string> strings(const GgufMetadata& m, const char* key,
                                        const std::string& what) {
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

inline std::optional<int32_t> token_id(const GgufMetadata& m, const char* key, size_t n,
                                       const std::string& what) {
  const GgufValue* v = m.find(key);
  if (!v) return std::nullopt;
  const int64_t id = v->as_int(what + ": " + key);
  TESSEL_CHECK(id >= 0 && uint64_t(id) < n, what, ": ", key, " = ", id,
               " is not a token id (the vocabulary has ", n, ")");
  return int32_t(id);
}

inline bool flag(const GgufMetadata& m, const char* key, bool fallback, const std::string& what) {
  const GgufValue* v = m.find(key);
  return v ? v->as_bool(what + ": " + key) : fallback;
}

inline void set_id(GgufMetadata& out, const char* key, std::optional<int32_t> id) {
  if (id) out.set(key, GgufValue::of_u32(uint32_t(*id)));
}

// SentencePiece models (gguf_tokenizer_sentencepiece.cpp): "llama" is a BPE, "t5" a unigram
// model; `settings` already holds the special tokens the ids name.
SentencePieceModel sentencepiece_from_gguf(const GgufMetadata& m, const std::string& model,
                                           const std::vector<std::string>& tokens,
                                           const std::vector<int32_t>& types,
                                           const TokenizerSettings& settings,
                                           const std::string& what);
// Writes the model's keys (not the special-token ids and flags, which the caller writes); an
// Error for what GGUF cannot hold.
void sentencepiece_to_gguf(const SentencePieceModel& sp, GgufMetadata& out);

}  // namespace tessel::io::detail::gguf_keys
