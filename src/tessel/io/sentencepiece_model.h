// SPDX-License-Identifier: Apache-2.0
// SentencePiece model files (`tokenizer.model`): the serialized ModelProto of
// sentencepiece_model.proto, read with a minimal protobuf wire-format reader that checks every
// varint, tag and length against the buffer. Only the fields that change tokenization are kept.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::io {

struct SentencePieceModel {
  // ModelProto.SentencePiece.Type; values as in the .proto.
  enum class PieceType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
  };
  // TrainerSpec.ModelType.
  enum class ModelType : int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

  struct Piece {
    std::string piece;
    float score = 0.0f;
    PieceType type = PieceType::kNormal;
  };
  struct Normalizer {
    std::string name;                  // e.g. "nmt_nfkc", "identity" (informational)
    std::string precompiled_charsmap;  // empty: no character normalization
    bool add_dummy_prefix = true;
    bool remove_extra_whitespaces = true;
    bool escape_whitespaces = true;
    bool present = false;  // the message was in the file
  };

  std::string source;  // the file, for error messages
  std::vector<Piece> pieces;
  ModelType model_type = ModelType::kUnigram;
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  std::string unk_surface = " \xE2\x81\x87 ";  // what decoding prints for <unk>
  std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
  Normalizer normalizer;
  Normalizer denormalizer;
};

// Parses a serialized ModelProto; `source` names it in errors. Throws tessel::Error for any
// malformed or truncated input (naming the field and byte offset) and for a wire type that does
// not match a known field.
SentencePieceModel parse_sentencepiece_model(std::string_view bytes, const std::string& source);

// Reads and parses a .model file.
SentencePieceModel read_sentencepiece_model(const std::string& path);

}  // namespace tessel::io
