// SPDX-License-Identifier: Apache-2.0
// Internal to io: the SentencePiece-style models of Hugging Face tokenizer.json (Llama 2,
// Mistral, TinyLlama; converted unigram models), with the semantics of the `tokenizers` crate:
// normalizers Prepend / Replace, the Metaspace pre-tokenizer, BPE with byte_fallback and fuse_unk
// (models/bpe/model.rs merge_word, word.rs merge_all), Unigram (models/unigram/model.rs
// encode_optimized, f64 scores, unknown runs fused) and the decoders Replace, Metaspace,
// ByteFallback, Fuse and Strip.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/io/bpe.h"
#include "tessel/io/tokenizer_model.h"

namespace tessel::io::detail {

struct HfSentencePieceSpec {
  enum class Kind { kBpe, kUnigram };
  struct NormalizerStep {
    bool prepend = false;  // Prepend(text) when true, else Replace(text -> content)
    std::string text, content;
  };
  struct Metaspace {
    std::string replacement = std::string(kMetaspace);
    enum class Scheme { kAlways, kFirst, kNever } scheme = Scheme::kAlways;
    bool split = true;
  };
  struct Decoder {
    // Per-token steps, in order: Replace(text -> content), or Metaspace when `metaspace` is set.
    struct Step {
      std::string text, content;
      bool metaspace = false;
      bool prepend = true;  // Metaspace: the first token loses its replacement characters
    };
    std::vector<Step> steps;
    bool byte_fallback = false;
    std::string strip_content;  // Strip after Fuse: up to `start` leading, `stop` trailing chars
    size_t strip_start = 0, strip_stop = 0;
  };

  std::string source;
  Kind kind = Kind::kBpe;
  std::vector<std::string> tokens;  // by id, the model vocabulary then added tokens beyond it
  size_t model_vocab = 0;           // tokens[0, model_vocab) are the model's
  // BPE
  std::vector<std::pair<std::string, std::string>> merges;
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool ignore_merges = false;
  // Unigram
  std::vector<double> scores;
  std::optional<int32_t> unk_id;
  // both
  bool byte_fallback = false;
  std::vector<NormalizerStep> normalizer;
  std::optional<Metaspace> pre_tokenizer;
  Decoder decoder;
};

class HfSentencePieceModel final : public TokenModel {
 public:
  // Validates; errors name spec.source and the entry.
  explicit HfSentencePieceModel(HfSentencePieceSpec spec);

  void encode(std::string_view text, bool at_start, std::vector<int32_t>& out) const override;
  std::unique_ptr<DecodeStream> decoder(bool raw) const override;

  const HfSentencePieceSpec& spec() const { return s_; }

 private:
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view word, std::vector<int32_t>& out) const;
  void encode_unigram(std::string_view word, std::vector<int32_t>& out) const;

  HfSentencePieceSpec s_;
  StringMap<int32_t> vocab_;  // the model vocabulary
  BpeMerges merges_;
  PrefixTrie trie_;
  double min_score_ = 0;
  std::optional<int32_t> unk_;  // BPE: the id of unk_token
};

}  // namespace tessel::io::detail
