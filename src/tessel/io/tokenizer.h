// SPDX-License-Identifier: Apache-2.0
// Tokenizers: text -> ids and back, loaded from the files a model directory has. Byte-level BPE
// (GPT-2, Radford et al. 2019; Llama 3 / Qwen2 tokenizer.json with a Split regex): text ->
// pre-tokenized pieces -> bytes -> BPE merges -> ids. SentencePiece (Kudo & Richardson 2018):
// .model files (BPE and unigram) and SentencePiece-style tokenizer.json (Llama 2, Mistral,
// TinyLlama: U+2581 for spaces, byte fallback). See docs/TOKENIZER.md.
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

class GgufMetadata;
struct SentencePieceModel;

namespace detail {
class TokenModel;
class DecodeStream;
}  // namespace detail

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
  // Regexes that split each piece of the one before, in order (llama.cpp's regex chains, e.g.
  // "deepseek-coder"); pieces are matches and the text between them, as for `pattern`.
  std::vector<std::string> then_patterns;
  bool add_prefix_space = false;  // prepend " " to text that does not start with one
  bool ignore_merges = false;     // a piece that is itself a vocab token skips BPE
  std::string pretokenizer_name;  // GGUF's tokenizer.ggml.pre when read from one, else empty
};

// What tokenizer_config.json says (Hugging Face transformers), or defaults from the tokenizer
// file itself when there is none: SentencePiece's bos/eos/unk/pad pieces, a tokenizer.json
// TemplateProcessing that puts a special token first (add_bos_token) or last (add_eos_token).
struct TokenizerSettings {
  std::string source;  // the tokenizer_config.json read, or empty
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  bool add_bos_token = false;
  bool add_eos_token = false;
  // Jinja text, kept for a server to render; named templates when the file gives a list.
  std::optional<std::string> chat_template;
  std::vector<std::pair<std::string, std::string>> named_chat_templates;
  std::optional<int64_t> model_max_length;  // absent when the file says "unlimited" (1e30)
};

class StreamDecoder;

class Tokenizer {
 public:
  // Validates and builds; every problem throws tessel::Error naming config.source and the entry.
  explicit Tokenizer(TokenizerConfig config);

  // vocab.json (token -> id) + merges.txt ("a b" per line after "#version"); OpenAI's
  // encoder.json + vocab.bpe are the same formats. special_tokens name vocab tokens to treat as
  // special; by default "<|endoftext|>" when the vocabulary has it.
  static Tokenizer from_vocab_merges(const std::string& vocab_path, const std::string& merges_path,
                                     std::optional<std::vector<std::string>> special_tokens = {});
  // A Hugging Face tokenizer.json: byte-level BPE (a ByteLevel pre-tokenizer, optionally behind a
  // Split with its own regex, as Llama 3 has), or SentencePiece-style BPE (no pre-tokenizer or
  // Metaspace; byte_fallback: Llama 2, Mistral) or Unigram. Other model types are errors.
  static Tokenizer from_tokenizer_json(const std::string& path);
  // A SentencePiece model file (tokenizer.model): BPE or unigram.
  static Tokenizer from_sentencepiece(const std::string& path);
  // The same from a parsed model (its source names it in errors).
  static Tokenizer from_sentencepiece_model(SentencePieceModel model);
  // GGUF metadata's tokenizer.ggml.* keys (gguf_tokenizer.cpp): model "gpt2" (byte-level BPE from
  // tokens and merges) or "llama" (SentencePiece BPE: tokens, scores, token types, byte
  // fallback), with the bos / eos / pad ids, add_bos/eos_token and tokenizer.chat_template.
  static Tokenizer from_gguf(const GgufMetadata& metadata, const std::string& source);
  // This tokenizer as those keys, for writing a GGUF; an Error for a kind GGUF has no model for.
  void to_gguf(GgufMetadata& out) const;
  // A file (tokenizer.json or a SentencePiece .model) or a model directory: tokenizer.json, else
  // tokenizer.model, else vocab.json + merges.txt, else encoder.json + vocab.bpe; plus the
  // tokenizer_config.json beside them, when there is one.
  static Tokenizer load(const std::string& path);
  // Which of those files `dir` has ("tokenizer.json", "tokenizer.model", "vocab.json +
  // merges.txt", "encoder.json + vocab.bpe"), or nullopt.
  static std::optional<std::string> files_in(const std::string& dir);
  // Reads a tokenizer_config.json; token names are checked against this tokenizer's vocabulary.
  Tokenizer with_config(const std::string& tokenizer_config_path) const;

  // Ids of text. Special tokens in the text are recognised only when allow_special is set;
  // otherwise they are encoded as ordinary text (like tiktoken's encode_ordinary). Text that is
  // not valid UTF-8 still round-trips: ill-formed bytes are encoded as byte tokens.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out,
                     bool allow_special = false) const;
  // encode() with the BOS and EOS that settings() asks for (add_bos_token, add_eos_token).
  std::vector<int32_t> encode_with_special_tokens(std::string_view text,
                                                  bool allow_special = false) const;

  // The bytes the ids spell, exactly (may cut a UTF-8 sequence between tokens). SentencePiece
  // models: decode() with byte-fallback runs left as raw bytes.
  std::string decode_bytes(std::span<const int32_t> ids) const;
  // The same as text: ill-formed UTF-8 becomes U+FFFD (Python's errors="replace"). SentencePiece
  // .model: exactly the library's Decode; tokenizer.json: its decoder, as Hugging Face's
  // decode(ids, skip_special_tokens=False).
  std::string decode(std::span<const int32_t> ids) const;
  // Decodes ids one at a time without splitting a UTF-8 character (see StreamDecoder).
  StreamDecoder stream_decoder() const;

  int64_t vocab_size() const;
  // What a byte-level BPE is built from (empty / nullopt for the other algorithms): the merges in
  // rank order and the pre-tokenizer regex.
  std::vector<std::pair<std::string, std::string>> bpe_merges() const;
  std::optional<std::string> pretokenizer_pattern() const;
  // All the pre-tokenizer regexes: pretokenizer_pattern() and the ones chained after it.
  std::vector<std::string> pretokenizer_patterns() const;
  // Whether a pre-tokenized piece that is itself a token skips the merges (Llama 3's BPE).
  bool ignores_merges() const;
  // Whether a space is put before text that does not start with one (ByteLevel add_prefix_space).
  bool adds_prefix_space() const;
  // The tokenizer.ggml.pre name a GGUF file gave this byte-level BPE (empty when not from GGUF).
  const std::string& pretokenizer_name() const;
  // The model of a tokenizer read from a SentencePiece .model (or GGUF "llama"), else null.
  const SentencePieceModel* sentencepiece_model() const;
  // The vocabulary spelling of a token (byte-level alphabet, e.g. "Ġthe"; added tokens as is).
  const std::string& token(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view spelling) const;
  const std::vector<AddedToken>& added_tokens() const;
  // The id of a special token such as "<|endoftext|>", if the tokenizer has it.
  std::optional<int32_t> special_token_id(std::string_view content) const;
  const TokenizerSettings& settings() const { return *settings_; }
  // The ids of settings().bos_token / eos_token / pad_token, when set.
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> pad_token_id() const;

  // The per-piece cache (bounded; cleared when full). Encoding results never depend on it.
  void set_cache_capacity(size_t pieces);
  void clear_cache() const;
  size_t cache_size() const;

 private:
  friend class StreamDecoder;
  Tokenizer() = default;
  const detail::TokenModel* impl_model() const;
  // A tokenizer whose algorithm is `model`: spelling by id, added tokens among them.
  static Tokenizer from_model(std::string source, std::vector<std::string> spelling,
                              std::vector<AddedToken> added,
                              std::shared_ptr<const detail::TokenModel> model,
                              TokenizerSettings settings);

  struct Impl;
  std::shared_ptr<Impl> impl_;
  std::shared_ptr<const TokenizerSettings> settings_ = std::make_shared<TokenizerSettings>();
};

// Incremental decoding for streamed generation: push() takes one id and returns the text that is
// complete so far, holding back an unfinished UTF-8 character or byte-fallback run; finish()
// returns the rest. The concatenation of everything returned equals tokenizer.decode(ids), and
// every returned piece is well-formed UTF-8. Keeps a copy of the tokenizer (cheap, shared).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer);
  ~StreamDecoder();
  StreamDecoder(StreamDecoder&&) noexcept;
  StreamDecoder& operator=(StreamDecoder&&) noexcept;

  std::string push(int32_t id);
  std::string finish();

 private:
  Tokenizer tokenizer_;
  std::unique_ptr<detail::DecodeStream> stream_;
};

}  // namespace tessel::io
