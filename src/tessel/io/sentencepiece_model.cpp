// SPDX-License-Identifier: Apache-2.0
// The ModelProto fields SentencePiece tokenization uses, read with the bounds-checked protobuf
// wire reader (protobuf_wire.h): a known field with the wrong wire type is an error.
#include "tessel/io/sentencepiece_model.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "tessel/core/error.h"
#include "tessel/io/protobuf_wire.h"

namespace tessel::io {
namespace {

using namespace wire;

void read_piece(WireReader r, SentencePieceModel::Piece& piece) {
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    switch (field) {
      case 1:
        piece.piece = read_string(r, field, wire, "piece");
        break;
      case 2:
        r.expect(field, wire, kFixed32, "score");
        piece.score = r.fixed<float>("score");
        break;
      case 3:
        piece.type = SentencePieceModel::PieceType(read_enum(r, field, wire, "type"));
        break;
      default:
        r.skip(field, wire);
    }
  }
}

void read_trainer_spec(WireReader r, SentencePieceModel& m) {
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    switch (field) {
      case 3:
        m.model_type = SentencePieceModel::ModelType(read_enum(r, field, wire, "model_type"));
        break;
      case 24:
        m.treat_whitespace_as_suffix = read_bool(r, field, wire, "treat_whitespace_as_suffix");
        break;
      case 35:
        m.byte_fallback = read_bool(r, field, wire, "byte_fallback");
        break;
      case 44:
        m.unk_surface = read_string(r, field, wire, "unk_surface");
        break;
      case 45:
        m.unk_piece = read_string(r, field, wire, "unk_piece");
        break;
      case 46:
        m.bos_piece = read_string(r, field, wire, "bos_piece");
        break;
      case 47:
        m.eos_piece = read_string(r, field, wire, "eos_piece");
        break;
      case 48:
        m.pad_piece = read_string(r, field, wire, "pad_piece");
        break;
      default:
        r.skip(field, wire);
    }
  }
}

void read_normalizer(WireReader r, SentencePieceModel::Normalizer& n) {
  n.present = true;
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    switch (field) {
      case 1:
        n.name = read_string(r, field, wire, "name");
        break;
      case 2:
        n.precompiled_charsmap = read_string(r, field, wire, "precompiled_charsmap");
        break;
      case 3:
        n.add_dummy_prefix = read_bool(r, field, wire, "add_dummy_prefix");
        break;
      case 4:
        n.remove_extra_whitespaces = read_bool(r, field, wire, "remove_extra_whitespaces");
        break;
      case 5:
        n.escape_whitespaces = read_bool(r, field, wire, "escape_whitespaces");
        break;
      default:
        r.skip(field, wire);
    }
  }
}

}  // namespace

SentencePieceModel parse_sentencepiece_model(std::string_view bytes, const std::string& source) {
  const std::string where = "tokenizer: " + source;
  TESSEL_CHECK(!bytes.empty(), where, ": the file is empty (expected a SentencePiece ModelProto)");
  SentencePieceModel m;
  m.source = source;
  bool trainer_spec = false;
  WireReader r(bytes, 0, bytes.size(), where);
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    switch (field) {
      case 1: {
        const std::string name = "pieces[" + std::to_string(m.pieces.size()) + "]";
        WireReader sub = sub_message(r, field, wire, name);
        SentencePieceModel::Piece piece;
        read_piece(std::move(sub), piece);
        m.pieces.push_back(std::move(piece));
        break;
      }
      case 2:
        read_trainer_spec(sub_message(r, field, wire, "trainer_spec"), m);
        trainer_spec = true;
        break;
      case 3:
        read_normalizer(sub_message(r, field, wire, "normalizer_spec"), m.normalizer);
        break;
      case 5:
        read_normalizer(sub_message(r, field, wire, "denormalizer_spec"), m.denormalizer);
        break;
      default:
        r.skip(field, wire);
    }
  }
  TESSEL_CHECK(!m.pieces.empty(), where,
               ": the model has no pieces (is this a SentencePiece .model?)");
  // The library always writes both after the pieces: a file without them was cut short.
  TESSEL_CHECK(trainer_spec && m.normalizer.present, where, ": the model has no ",
               trainer_spec ? "normalizer_spec" : "trainer_spec",
               " (the file is truncated, or not a SentencePiece model)");
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const auto& p = m.pieces[i];
    TESSEL_CHECK(!p.piece.empty(), where, ": pieces[", i, "] is empty");
    const int32_t t = int32_t(p.type);
    TESSEL_CHECK(t >= 1 && t <= 6, where, ": pieces[", i, "] '", p.piece, "' has type ", t,
                 ", not one of NORMAL(1) .. BYTE(6)");
  }
  const int32_t type = int32_t(m.model_type);
  TESSEL_CHECK(type >= 1 && type <= 4, where, ": trainer_spec.model_type ", type,
               " is not a SentencePiece model type");
  return m;
}

SentencePieceModel read_sentencepiece_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "tokenizer: cannot open ", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  TESSEL_CHECK(!in.bad(), "tokenizer: error reading ", path);
  return parse_sentencepiece_model(buffer.str(), path);
}

}  // namespace tessel::io
