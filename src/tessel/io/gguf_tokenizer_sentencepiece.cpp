// SPDX-License-Identifier: Apache-2.0
// SentencePiece models in GGUF metadata. "llama" is a SentencePiece BPE (scores are merge
// priorities, <0xNN> pieces for byte fallback); "t5" is a SentencePiece unigram model (scores are
// log probabilities for the Viterbi search) with the normalizer's precompiled character map
// stored as bytes in tokenizer.ggml.precompiled_charsmap. Both become the SentencePieceModel a
// tokenizer.model file gives, so they encode with the same code and the same normalization.
#include <algorithm>

#include "tessel/io/gguf_tokenizer_keys.h"

namespace tessel::io::detail::gguf_keys {

namespace {

std::string charsmap(const GgufMetadata& m, const std::string& what) {
  const GgufValue* v = m.find(kCharsMap);
  if (!v) return {};
  const std::string name = what + ": " + kCharsMap;
  TESSEL_CHECK(v->type == GgufType::Array && (v->elem == GgufType::U8 || v->elem == GgufType::I8),
               name, " must be an array of u8 or i8 (the map's bytes), got ",
               gguf_type_name(v->type),
               v->type == GgufType::Array ? std::string(" of ") + gguf_type_name(v->elem) : "");
  std::string bytes;
  bytes.reserve(v->items.size());
  for (const GgufValue& b : v->items)
    bytes.push_back(char(v->elem == GgufType::U8 ? uint8_t(b.uint) : uint8_t(int8_t(b.sint))));
  return bytes;
}

}  // namespace

SentencePieceModel sentencepiece_from_gguf(const GgufMetadata& m, const std::string& model,
                                           const std::vector<std::string>& tokens,
                                           const std::vector<int32_t>& types,
                                           const TokenizerSettings& settings,
                                           const std::string& what) {
  const bool unigram = model == "t5";
  SentencePieceModel sp;
  sp.source = what;
  sp.model_type =
      unigram ? SentencePieceModel::ModelType::kUnigram : SentencePieceModel::ModelType::kBpe;
  const std::vector<float> scores = per_token<float>(
      m, kScores, tokens.size(), what,
      [](const GgufValue& v, const std::string& name) { return float(v.as_double(name)); });
  TESSEL_CHECK(!unigram || !scores.empty(), what, ": ", kScores,
               " is missing; a unigram model ('t5') is nothing without its piece scores");
  for (size_t i = 0; i < tokens.size(); ++i) {
    SentencePieceModel::Piece p;
    p.piece = tokens[i];
    p.score = scores.empty() ? 0.0f : scores[i];
    p.type = SentencePieceModel::PieceType(types.empty() ? kNormal : types[i]);
    sp.byte_fallback |= p.type == SentencePieceModel::PieceType::kByte;
    sp.pieces.push_back(std::move(p));
  }
  // The defaults are llama.cpp's when the file omits a key: Llama's SentencePiece settings (a
  // space before the text, runs of spaces kept); for "t5" neither, as its converter always writes
  // both. SentencePiece's own escaping of spaces as U+2581 holds for both.
  sp.normalizer.present = true;
  // llama.cpp reads the character map for "t5" only; so does tessel.
  if (unigram) sp.normalizer.precompiled_charsmap = charsmap(m, what);
  sp.normalizer.name = sp.normalizer.precompiled_charsmap.empty() ? "identity" : "precompiled";
  sp.normalizer.add_dummy_prefix = flag(m, kSpacePrefix, !unigram, what);
  sp.normalizer.remove_extra_whitespaces = flag(m, kExtraSpaces, false, what);
  if (settings.unk_token) sp.unk_piece = *settings.unk_token;
  if (settings.bos_token) sp.bos_piece = *settings.bos_token;
  if (settings.eos_token) sp.eos_piece = *settings.eos_token;
  if (settings.pad_token) sp.pad_piece = *settings.pad_token;
  return sp;
}

void sentencepiece_to_gguf(const SentencePieceModel& sp, GgufMetadata& out) {
  using ModelType = SentencePieceModel::ModelType;
  const bool unigram = sp.model_type == ModelType::kUnigram;
  TESSEL_CHECK(unigram || sp.model_type == ModelType::kBpe, "tokenizer ", sp.source,
               ": a SentencePiece ", sp.model_type == ModelType::kWord ? "word" : "char",
               " model has no GGUF form (GGUF has 'llama' for BPE and 't5' for unigram)");
  const auto& n = sp.normalizer;
  TESSEL_CHECK(unigram || n.precompiled_charsmap.empty(), "tokenizer ", sp.source,
               ": this SentencePiece BPE model normalizes text with a character map ('", n.name,
               "'), which GGUF's 'llama' tokenizer cannot carry");
  TESSEL_CHECK(n.escape_whitespaces && !sp.treat_whitespace_as_suffix, "tokenizer ", sp.source,
               ": GGUF cannot say escape_whitespaces = false or treat_whitespace_as_suffix = true");
  TESSEL_CHECK(!sp.denormalizer.present || sp.denormalizer.precompiled_charsmap.empty(),
               "tokenizer ", sp.source, ": GGUF cannot carry a denormalizer rule ('",
               sp.denormalizer.name, "')");
  out.set(kModel, GgufValue::of_string(unigram ? "t5" : "llama"));
  // llama.cpp's converter names no pre-tokenizer for unigram models but writes the key.
  if (unigram) out.set(kPre, GgufValue::of_string("default"));
  std::vector<std::string> tokens;
  std::vector<GgufValue> scores, types;
  for (const auto& p : sp.pieces) {
    tokens.push_back(p.piece);
    scores.push_back(GgufValue::of_float(GgufType::F32, p.score));
    types.push_back(GgufValue::of_int(GgufType::I32, int32_t(p.type)));
  }
  out.set(kTokens, GgufValue::of_strings(tokens));
  out.set(kScores, GgufValue::of_array(GgufType::F32, std::move(scores)));
  out.set(kTypes, GgufValue::of_array(GgufType::I32, std::move(types)));
  out.set(kSpacePrefix, GgufValue::of_bool(n.add_dummy_prefix));
  out.set(kExtraSpaces, GgufValue::of_bool(n.remove_extra_whitespaces));
  if (!n.precompiled_charsmap.empty()) {
    std::vector<GgufValue> bytes;
    bytes.reserve(n.precompiled_charsmap.size());
    for (const char c : n.precompiled_charsmap)
      bytes.push_back(GgufValue::of(GgufType::U8, uint8_t(c)));
    out.set(kCharsMap, GgufValue::of_array(GgufType::U8, std::move(bytes)));
  }
}

}  // namespace tessel::io::detail::gguf_keys
