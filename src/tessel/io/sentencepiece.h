// SPDX-License-Identifier: Apache-2.0
// Internal to io: SentencePiece tokenization of a parsed .model, written to give the ids and text
// of the sentencepiece library (v0.1.97 sources: normalizer.cc, bpe_model.cc, unigram_model.cc's
// EncodeOptimized, sentencepiece_processor.cc's PopulateSentencePieceText and Decode).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessel/io/precompiled_charsmap.h"
#include "tessel/io/sentencepiece_model.h"
#include "tessel/io/tokenizer_model.h"

namespace tessel::io::detail {

class SentencePieceTokenModel final : public TokenModel {
 public:
  using Type = SentencePieceModel::PieceType;

  // Validates the model (as sentencepiece's InitializePieces does, plus what tessel does not
  // support); every problem throws tessel::Error naming model.source.
  explicit SentencePieceTokenModel(SentencePieceModel model);

  void encode(std::string_view text, bool at_start, std::vector<int32_t>& out) const override;
  std::unique_ptr<DecodeStream> decoder(bool raw) const override;

  // The text the encoders see: character map, white space rules, U+2581 for spaces.
  std::string normalize(std::string_view text) const;

  const SentencePieceModel& model() const { return m_; }
  Type type(int32_t id) const { return m_.pieces[id].type; }
  int32_t unk_id() const { return unk_id_; }
  // The id of a piece as sentencepiece's PieceToId: control/unknown/byte pieces first, then the
  // others; unk_id() when absent.
  int32_t piece_to_id(std::string_view piece) const;

 private:
  struct Piece {
    std::string_view text;
    int32_t id;
  };
  // Longest user-defined piece at the start of text (0: none).
  size_t user_defined_prefix(std::string_view text) const;
  // One normalization step: the replacement for the start of text and how many bytes it used.
  std::pair<std::string_view, size_t> normalize_prefix(std::string_view text) const;
  void encode_bpe(std::string_view normalized, std::vector<Piece>& result) const;
  void encode_unigram(std::string_view normalized, std::vector<Piece>& result) const;

  SentencePieceModel m_;
  PrecompiledCharsMap charsmap_;
  StringMap<int32_t> pieces_;    // NORMAL, USER_DEFINED, UNUSED
  StringMap<int32_t> reserved_;  // CONTROL, UNKNOWN, BYTE
  PrefixTrie user_defined_;      // value: the piece's byte length
  PrefixTrie trie_;              // unigram: every piece in pieces_
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> byte_ids_{};
  float min_score_ = 0, max_score_ = 0;
};

}  // namespace tessel::io::detail
