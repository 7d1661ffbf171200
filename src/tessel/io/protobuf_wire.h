// SPDX-License-Identifier: Apache-2.0
// Internal to io: a minimal protobuf wire-format reader (varints, fixed32/64, length-delimited
// fields; see protobuf's encoding documentation), for the SentencePiece ModelProto and the
// TensorBoard Event records. Nothing is trusted: every varint is bounded to 10 bytes, every length
// is checked against what is left of its enclosing message, and errors name the source and the
// byte offset.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "tessel/core/error.h"

namespace tessel::io::wire {

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

  // A little-endian fixed-width field as T (float: wire type 5, double: wire type 1).
  template <typename T>
  T fixed(const char* what) {
    constexpr size_t n = sizeof(T);
    fail_if(end_ - pos_ < n, pos_, what, ": ", n, " bytes needed, ", end_ - pos_, " left");
    uint64_t bits = 0;
    for (size_t i = 0; i < n; ++i) bits |= uint64_t(uint8_t(buf_[pos_ + i])) << (8 * i);
    pos_ += n;
    T value;
    if constexpr (n == 4) {
      const uint32_t low = uint32_t(bits);
      std::memcpy(&value, &low, n);
    } else {
      std::memcpy(&value, &bits, n);
    }
    return value;
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

inline bool read_bool(WireReader& r, uint32_t field, uint32_t wire, const char* name) {
  r.expect(field, wire, kVarint, name);
  return r.varint(name) != 0;
}

inline int32_t read_enum(WireReader& r, uint32_t field, uint32_t wire, const char* name) {
  r.expect(field, wire, kVarint, name);
  return int32_t(uint32_t(r.varint(name)));  // int32 enums: negative values use 10 bytes
}

inline std::string read_string(WireReader& r, uint32_t field, uint32_t wire, const char* name) {
  r.expect(field, wire, kLength, name);
  return r.string(name);
}

inline WireReader sub_message(WireReader& r, uint32_t field, uint32_t wire,
                              const std::string& name) {
  r.expect(field, wire, kLength, name.c_str());
  const auto [b, e] = r.length_delimited(name.c_str());
  return WireReader(r.buffer(), b, e, r.where());
}

}  // namespace tessel::io::wire
