// SPDX-License-Identifier: Apache-2.0
// Byte-level BPE tokenizer (GPT-2, Radford et al. 2019): text -> pre-tokenized pieces -> bytes ->
// BPE merges -> ids, and back. Loads the files users already have: vocab.json + merges.txt (or
// OpenAI's encoder.json + vocab.bpe) and Hugging Face tokenizer.json.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessel::io {

// A token matched whole in the input before pre-tokenization (e.g. "<|endoftext|>").
struct AddedToken {
  int32_t id = 0;
  std::string content;   // the literal text it matches (raw text, not byte-level spelling)
  bool special = false;  // special tokens are matched only when the caller allows them
  bool lstrip = false;   // also absorbs the whitespace just before it
  bool rstrip = false;   // also absorbs the whitespace just after it
};

// Everything a tokenizer is built from, already parsed. The file loaders produce one; tests may
// write one directly.
struct TokenizerConfig {
  std::string source;                                       // names the files in error messages
  std::vector<std::string> vocab;                           // byte-level spelling, indexed by id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::function<std::string(size_t)> describe_merge;  // "line 7" or "model.merges[5]" (optional)
  std::vector<AddedToken> added_tokens;
  std::optional<std::string> pattern;  // pre-tokenizer regex; nullopt: no splitting
  bool add_prefix_space = false;       // prepend " " to text that does not start with one
  bool ignore_merges = false;          // a piece that is itself a vocab token skips BPE
};

class Tokenizer {
 public:
  // Validates and builds; every problem throws tessel::Error naming config.source and the entry.
  explicit Tokenizer(TokenizerConfig config);

  // vocab.json (token -> id) + merges.txt ("a b" per line after "#version"); OpenAI's
  // encoder.json + vocab.bpe are the same formats. special_tokens name vocab tokens to treat as
  // special; by default "<|endoftext|>" when the vocabulary has it.
  static Tokenizer from_vocab_merges(const std::string& vocab_path, const std::string& merges_path,
                                     std::optional<std::vector<std::string>> special_tokens = {});
  // A Hugging Face tokenizer.json with a BPE model and a ByteLevel pre-tokenizer (optionally
  // behind a Split with its own regex, as Llama 3 has).
  static Tokenizer from_tokenizer_json(const std::string& path);
  // A file (tokenizer.json) or a model directory: tokenizer.json, else vocab.json + merges.txt,
  // else encoder.json + vocab.bpe.
  static Tokenizer load(const std::string& path);

  // Ids of text. Special tokens in the text are recognised only when allow_special is set;
  // otherwise they are encoded as ordinary text (like tiktoken's encode_ordinary). Text that is
  // not valid UTF-8 still round-trips: ill-formed bytes are encoded as byte tokens.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out,
                     bool allow_special = false) const;

  // The bytes the ids spell, exactly (may cut a UTF-8 sequence between tokens).
  std::string decode_bytes(std::span<const int32_t> ids) const;
  // The same as text: ill-formed UTF-8 becomes U+FFFD (Python's errors="replace").
  std::string decode(std::span<const int32_t> ids) const;

  int64_t vocab_size() const;
  // The vocabulary spelling of a token (byte-level alphabet, e.g. "Ġthe"; added tokens as is).
  const std::string& token(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view spelling) const;
  const std::vector<AddedToken>& added_tokens() const;
  // The id of a special token such as "<|endoftext|>", if the tokenizer has it.
  std::optional<int32_t> special_token_id(std::string_view content) const;

  // The per-piece cache (bounded; cleared when full). Encoding results never depend on it.
  void set_cache_capacity(size_t pieces);
  void clear_cache() const;
  size_t cache_size() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace tessel::io
