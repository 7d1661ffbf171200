// SPDX-License-Identifier: Apache-2.0
// SentencePiece models: validation (as sentencepiece's InitializePieces), decoding as the
// library's Decode (control pieces print nothing, <unk> prints unk_surface, byte pieces are joined
// and each ill-formed byte becomes U+FFFD, U+2581 becomes a space, and the first piece loses one
// leading U+2581 under add_dummy_prefix) done as a stream, and Tokenizer::from_sentencepiece.
#include "tessel/io/sentencepiece.h"

#include <cfloat>
#include <filesystem>

#include "tessel/core/error.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {
namespace detail {
namespace {

const char* type_name(SentencePieceModel::ModelType t) {
  switch (t) {
    case SentencePieceModel::ModelType::kUnigram:
      return "UNIGRAM";
    case SentencePieceModel::ModelType::kBpe:
      return "BPE";
    case SentencePieceModel::ModelType::kWord:
      return "WORD";
    case SentencePieceModel::ModelType::kChar:
      return "CHAR";
  }
  return "?";
}

// Bytes of the character a lead byte starts, as sentencepiece's DecodeUTF8 reads them; a byte
// that starts no sequence needs only itself.
size_t needed(uint8_t b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

bool valid_utf8_char(std::string_view s) {  // s is one whole candidate sequence
  char32_t cp = 0;
  const auto b = [&](size_t i) { return uint8_t(s[i]); };
  const auto trail = [&](size_t i) { return (b(i) & 0xC0) == 0x80; };
  switch (s.size()) {
    case 1:
      return b(0) < 0x80;
    case 2:
      cp = ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
      return trail(1) && cp >= 0x80;
    case 3:
      cp = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
      return trail(1) && trail(2) && cp >= 0x800 && (cp < 0xD800 || cp >= 0xE000);
    case 4:
      cp = ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
      return trail(1) && trail(2) && trail(3) && cp >= 0x10000 && cp <= 0x10FFFF;
  }
  return false;
}

class SentencePieceDecodeStream final : public DecodeStream {
 public:
  SentencePieceDecodeStream(const SentencePieceTokenModel& m, bool raw) : m_(m), raw_(raw) {}

  void push(int32_t id, std::string& out) override {
    using Type = SentencePieceTokenModel::Type;
    if (m_.type(id) == Type::kByte) {
      run_ += char(byte_piece_value(m_.model().pieces[id].piece));
      drain(false, out);
      return;
    }
    drain(true, out);
    if (bos_ws_seen_ || nonempty_) is_bos_ws_ = false;
    bos_ws_seen_ = false;
    if (m_.type(id) == Type::kControl) return;
    if (m_.type(id) == Type::kUnknown) {
      emit(m_.model().unk_surface, out);
      return;
    }
    std::string_view piece = m_.model().pieces[id].piece;
    const auto& spec = m_.model().normalizer;
    if (is_bos_ws_ && (spec.add_dummy_prefix || spec.remove_extra_whitespaces)) {
      if (piece.starts_with(kMetaspace)) {
        piece.remove_prefix(kMetaspace.size());
        bos_ws_seen_ = !spec.remove_extra_whitespaces;
      }
    }
    std::string text;
    for (size_t i = 0; i < piece.size();) {
      if (piece.substr(i).starts_with(kMetaspace)) {
        text += ' ';
        i += kMetaspace.size();
      } else {
        text += piece[i++];
      }
    }
    emit(text, out);
  }

  void finish(std::string& out) override { drain(true, out); }

 private:
  void emit(std::string_view text, std::string& out) {
    out += text;
    nonempty_ = nonempty_ || !text.empty();
  }

  // Decodes the complete characters of the byte run; at its end (`all`) the rest too.
  void drain(bool all, std::string& out) {
    if (raw_) {
      emit(run_, out);
      run_.clear();
      return;
    }
    size_t at = 0;
    while (at < run_.size()) {
      const size_t n = needed(uint8_t(run_[at]));
      const size_t have = run_.size() - at;
      if (have < n && !all) break;  // more bytes may complete it
      if (have >= n && valid_utf8_char(std::string_view(run_).substr(at, n))) {
        emit(std::string_view(run_).substr(at, n), out);
        at += n;
      } else {
        emit("\xEF\xBF\xBD", out);  // one U+FFFD per ill-formed byte
        at += 1;
      }
    }
    run_.erase(0, at);
  }

  const SentencePieceTokenModel& m_;
  const bool raw_;
  bool is_bos_ws_ = true, bos_ws_seen_ = false, nonempty_ = false;
  std::string run_;
};

}  // namespace

SentencePieceTokenModel::SentencePieceTokenModel(SentencePieceModel model)
    : m_(std::move(model)),
      charsmap_(m_.normalizer.precompiled_charsmap,
                "tokenizer: " + m_.source + ": normalizer_spec") {
  const std::string where = "tokenizer: " + m_.source + ": ";
  using MT = SentencePieceModel::ModelType;
  TESSEL_CHECK(m_.model_type == MT::kBpe || m_.model_type == MT::kUnigram, where,
               "trainer_spec.model_type ", type_name(m_.model_type),
               " is not supported (supported: UNIGRAM, BPE)");
  TESSEL_CHECK(!m_.treat_whitespace_as_suffix, where,
               "trainer_spec.treat_whitespace_as_suffix = true is not supported");
  TESSEL_CHECK(m_.denormalizer.precompiled_charsmap.empty(), where,
               "a denormalizer_spec with a character map ('", m_.denormalizer.name,
               "') is not supported");
  TESSEL_CHECK(m_.pieces.size() < size_t{INT32_MAX}, where, "too many pieces");
  byte_ids_.fill(-1);
  min_score_ = FLT_MAX;
  max_score_ = FLT_MIN;  // sic: the library's initial value, which user-defined scores use
  for (size_t i = 0; i < m_.pieces.size(); ++i) {
    const auto& p = m_.pieces[i];
    const bool normal =
        p.type == Type::kNormal || p.type == Type::kUserDefined || p.type == Type::kUnused;
    auto& map = normal ? pieces_ : reserved_;
    const auto [it, fresh] = map.emplace(p.piece, int32_t(i));
    TESSEL_CHECK(fresh, where, "piece '", p.piece, "' is defined twice (ids ", it->second, " and ",
                 i, ")");
    if (p.type == Type::kUnknown) {
      TESSEL_CHECK(unk_id_ < 0, where, "two unknown pieces (ids ", unk_id_, " and ", i, ")");
      unk_id_ = int32_t(i);
    }
    if (p.type == Type::kUserDefined) user_defined_.insert(p.piece, int32_t(p.piece.size()));
    if (normal) trie_.insert(p.piece, int32_t(i));
    if (p.type == Type::kNormal) {
      min_score_ = std::min(min_score_, p.score);
      max_score_ = std::max(max_score_, p.score);
    }
    if (p.type == Type::kByte) {
      TESSEL_CHECK(m_.byte_fallback, where, "byte piece '", p.piece,
                   "' is found although byte_fallback is false");
      const int b = byte_piece_value(p.piece);
      TESSEL_CHECK(b >= 0 && byte_piece(uint8_t(b)) == p.piece, where, "byte piece '", p.piece,
                   "' (id ", i, ") is not of the form <0xHH>");
      byte_ids_[b] = int32_t(i);
    }
  }
  TESSEL_CHECK(unk_id_ >= 0, where, "the model has no unknown piece (type UNKNOWN)");
  if (m_.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      TESSEL_CHECK(byte_ids_[b] >= 0, where, "byte_fallback is true but there is no piece ",
                   byte_piece(uint8_t(b)));
    }
  }
  TESSEL_CHECK(m_.model_type != MT::kUnigram || !pieces_.empty(), where,
               "a unigram model needs at least one normal piece");
}

int32_t SentencePieceTokenModel::piece_to_id(std::string_view piece) const {
  if (const auto it = reserved_.find(piece); it != reserved_.end()) return it->second;
  if (const auto it = pieces_.find(piece); it != pieces_.end()) return it->second;
  return unk_id_;
}

std::unique_ptr<DecodeStream> SentencePieceTokenModel::decoder(bool raw) const {
  return std::make_unique<SentencePieceDecodeStream>(*this, raw);
}

}  // namespace detail

Tokenizer Tokenizer::from_sentencepiece(const std::string& path) {
  return from_sentencepiece_model(read_sentencepiece_model(path));
}

Tokenizer Tokenizer::from_sentencepiece_model(SentencePieceModel parsed) {
  const std::string path = parsed.source;
  auto model = std::make_shared<const detail::SentencePieceTokenModel>(std::move(parsed));
  const SentencePieceModel& m = model->model();
  std::vector<std::string> spelling;
  std::vector<AddedToken> added;
  spelling.reserve(m.pieces.size());
  TokenizerSettings settings;
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const auto& p = m.pieces[i];
    spelling.push_back(p.piece);
    using Type = SentencePieceModel::PieceType;
    // Control and unknown pieces can be written in text only when special tokens are allowed.
    if (p.type == Type::kControl || p.type == Type::kUnknown) {
      added.push_back({int32_t(i), p.piece, true});
      if (p.piece == m.bos_piece && p.type == Type::kControl) settings.bos_token = p.piece;
      if (p.piece == m.eos_piece && p.type == Type::kControl) settings.eos_token = p.piece;
      if (p.piece == m.pad_piece && p.type == Type::kControl) settings.pad_token = p.piece;
      if (p.type == Type::kUnknown) settings.unk_token = p.piece;
    }
  }
  return from_model(path, std::move(spelling), std::move(added), std::move(model),
                    std::move(settings));
}

const SentencePieceModel* Tokenizer::sentencepiece_model() const {
  const auto* sp = dynamic_cast<const detail::SentencePieceTokenModel*>(impl_model());
  return sp ? &sp->model() : nullptr;
}

}  // namespace tessel::io
