// SPDX-License-Identifier: Apache-2.0
// A minimal protobuf wire-format reader (varints, fixed32/64, length-delimited fields; see
// protobuf's encoding documentation) and the ModelProto fields SentencePiece tokenization uses.
// Nothing is trusted: every varint is bounded to 10 bytes, every length is checked against what
// is left of its enclosing message, and a known field with the wrong wire type is an error.
#include "tessel/io/sentencepiece_model.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "tessel/core/error.h"

namespace tessel::io {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

// Reads one message: [begin, end) of the file's buffer. Offsets in errors are file offsets.
class WireReader {
 public:
  WireReader(std::string_view buffer, size_t begin, size_t end, std::string where)
      : buf_(buffer), pos_(begin), end_(end), where_(std::move(where)) {}

  bool done() const { return pos_ >= end_; }

  // The next field's number and wire type.
  std::pair<uint32_t, uint32_t> tag() {
    const size_t at = pos_;
    const uint64_t v = varint("a field tag");
    const uint64_t field = v >> 3;
    fail_if(field == 0 || field > 0x1FFFFFFF, at, "field number ", field, " is invalid");
    return {uint32_t(field), uint32_t(v & 7)};
  }

  uint64_t varint(const char* what) {
    const size_t at = pos_;
    uint64_t value = 0;
    for (int i = 0; i < 10; ++i) {
      fail_if(pos_ >= end_, at, what, ": the varint is truncated");
      const uint8_t b = uint8_t(buf_[pos_++]);
      fail_if(i == 9 && b > 1, at, what, ": the varint overflows 64 bits");
      value |= uint64_t(b & 0x7F) << (7 * i);
      if (!(b & 0x80)) return value;
    }
    fail_if(true, at, what, ": the varint is longer than 10 bytes");
    return 0;
  }

  float fixed32_float(const char* what) {
    fail_if(end_ - pos_ < 4, pos_, what, ": 4 bytes needed, ", end_ - pos_, " left");
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits |= uint32_t(uint8_t(buf_[pos_ + i])) << (8 * i);
    pos_ += 4;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

  // A length-delimited field: returns its [begin, end) and moves past it.
  std::pair<size_t, size_t> length_delimited(const char* what) {
    const size_t at = pos_;
    const uint64_t n = varint(what);
    fail_if(n > end_ - pos_, at, what, ": length ", n, " runs past the end of its message (",
            end_ - pos_, " bytes left)");
    const size_t begin = pos_;
    pos_ += size_t(n);
    return {begin, pos_};
  }
  std::string string(const char* what) {
    const auto [b, e] = length_delimited(what);
    return std::string(buf_.substr(b, e - b));
  }

  void skip(uint32_t field, uint32_t wire) {
    switch (wire) {
      case kVarint:
        varint("an unknown field");
        return;
      case kFixed64:
        fail_if(end_ - pos_ < 8, pos_, "field ", field, ": 8 bytes needed, ", end_ - pos_, " left");
        pos_ += 8;
        return;
      case kLength:
        length_delimited("an unknown field");
        return;
      case kFixed32:
        fail_if(end_ - pos_ < 4, pos_, "field ", field, ": 4 bytes needed, ", end_ - pos_, " left");
        pos_ += 4;
        return;
      default:
        fail_if(true, pos_, "field ", field, " has wire type ", wire, ", which is invalid");
    }
  }

  void expect(uint32_t field, uint32_t wire, uint32_t want, const char* name) {
    fail_if(wire != want, pos_, name, " (field ", field, ") has wire type ", wire, ", expected ",
            want);
  }

  const std::string& where() const { return where_; }
  std::string_view buffer() const { return buf_; }

 private:
  template <typename... Args>
  void fail_if(bool bad, size_t at, const Args&... args) const {
    TESSEL_CHECK(!bad, where_, " at byte ", at, ": ", args...);
  }

  std::string_view buf_;
  size_t pos_, end_;
  std::string where_;
};

bool read_bool(WireReader& r, uint32_t field, uint32_t wire, const char* name) {
  r.expect(field, wire, kVarint, name);
  return r.varint(name) != 0;
}

int32_t read_enum(WireReader& r, uint32_t field, uint32_t wire, const char* name) {
  r.expect(field, wire, kVarint, name);
  return int32_t(uint32_t(r.varint(name)));  // int32 enums: negative values use 10 bytes
}

std::string read_string(WireReader& r, uint32_t field, uint32_t wire, const char* name) {
  r.expect(field, wire, kLength, name);
  return r.string(name);
}

WireReader sub_message(WireReader& r, uint32_t field, uint32_t wire, const std::string& name) {
  r.expect(field, wire, kLength, name.c_str());
  const auto [b, e] = r.length_delimited(name.c_str());
  return WireReader(r.buffer(), b, e, r.where());
}

void read_piece(WireReader r, SentencePieceModel::Piece& piece) {
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    switch (field) {
      case 1:
        piece.piece = read_string(r, field, wire, "piece");
        break;
      case 2:
        r.expect(field, wire, kFixed32, "score");
        piece.score = r.fixed32_float("score");
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
