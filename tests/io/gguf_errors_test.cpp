// SPDX-License-Identifier: Apache-2.0
// GGUF: hand-built bad files, one per kind of damage the reader must catch, each asserting that
// the single Error names the file and the bad value.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error_text.h"
#include "gguf_sample.h"
#include "tessel/io/gguf.h"

namespace tessel::io {
namespace {

// Little-endian byte assembly for hand-built files.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Bytes& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Bytes& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    for (char c : std::string("GGUF")) b.push_back(uint8_t(c));
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  // A tensor info: name, dims, type, offset.
  Bytes& tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                uint64_t offset) {
    str(name).u32(uint32_t(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  // Zero bytes up to the data section (alignment 32), then `data` bytes.
  Bytes& data(size_t n) {
    b.resize(b.size() + (32 - b.size() % 32) % 32 + n, 0);
    return *this;
  }
};

void expect_parse_error(const Bytes& f, std::initializer_list<const char*> words) {
  test::expect_error([&] { parse_gguf(f.b.data(), f.b.size(), "bad.gguf"); }, {"bad.gguf"});
  test::expect_error([&] { parse_gguf(f.b.data(), f.b.size(), "bad.gguf"); }, words);
}

TEST(GgufErrors, TruncatedHeader) {
  std::vector<uint8_t> valid = gguf_sample_bytes();
  Bytes f;
  f.b.assign(valid.begin(), valid.begin() + 10);
  expect_parse_error(f, {"truncated", "tensor count", "offset 8"});
}

TEST(GgufErrors, TruncatedAnywhereIsAnError) {
  std::vector<uint8_t> valid = gguf_sample_bytes();
  const GgufHeader h = parse_gguf(valid.data(), valid.size(), "valid");
  for (size_t n = 0; n < h.data_start; n += 3) {
    std::vector<uint8_t> cut(valid.begin(), valid.begin() + std::ptrdiff_t(n));
    test::expect_error([&] { parse_gguf(cut.data(), cut.size(), "cut.gguf"); }, {"cut.gguf"});
  }
}

TEST(GgufErrors, NotGguf) {
  Bytes f;
  f.b = {'G', 'G', 'M', 'L', 3, 0, 0, 0};
  expect_parse_error(f, {"not a GGUF file"});
}

TEST(GgufErrors, UnsupportedVersion) {
  expect_parse_error(Bytes().header(0, 0, 1), {"version 1", "not supported"});
  expect_parse_error(Bytes().header(0, 0, 4), {"version 4"});
}

TEST(GgufErrors, AbsurdCounts) {
  expect_parse_error(Bytes().header(0, uint64_t(1) << 60),
                     {"metadata count 1152921504606846976", "impossible"});
  expect_parse_error(Bytes().header(~uint64_t(0), 0),
                     {"tensor count 18446744073709551615", "impossible"});
}

TEST(GgufErrors, StringLengthPastTheEnd) {
  Bytes f;
  f.header(0, 1).u64(1000).str("abc");
  expect_parse_error(f, {"metadata key", "length 1000", "past the end"});
  Bytes g;
  g.header(0, 1).str("k").u32(8).u64(~uint64_t(0) - 3);
  expect_parse_error(g, {"string value", "past the end"});
}

TEST(GgufErrors, UnknownValueType) {
  expect_parse_error(Bytes().header(0, 1).str("general.x").u32(13).u32(0),
                     {"'general.x'", "unknown value type 13"});
  expect_parse_error(Bytes().header(0, 1).str("arr").u32(9).u32(99).u64(0),
                     {"'arr'", "unknown value type 99"});
}

TEST(GgufErrors, BoolMustBeZeroOrOne) {
  expect_parse_error(Bytes().header(0, 1).str("flag").u32(7).u8(2), {"'flag'", "bool byte 2"});
}

TEST(GgufErrors, AbsurdArrayLength) {
  expect_parse_error(Bytes().header(0, 1).str("tokens").u32(9).u32(8).u64(uint64_t(1) << 40),
                     {"'tokens'", "claims 1099511627776 string elements"});
}

TEST(GgufErrors, ArraysNestedTooDeep) {
  Bytes f;
  f.header(0, 1).str("deep").u32(9);
  for (int i = 0; i < 12; ++i) f.u32(9).u64(1);
  f.u32(0).u64(0);
  expect_parse_error(f, {"'deep'", "nests arrays deeper than 8"});
}

TEST(GgufErrors, DuplicateKey) {
  expect_parse_error(Bytes().header(0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2),
                     {"'k'", "appears twice"});
}

TEST(GgufErrors, BadAlignment) {
  expect_parse_error(Bytes().header(0, 1).str("general.alignment").u32(4).u32(12),
                     {"general.alignment = 12", "multiple of 8"});
  expect_parse_error(Bytes().header(0, 1).str("general.alignment").u32(10).u64(32),
                     {"general.alignment must be a u32", "u64"});
}

TEST(GgufErrors, TooManyDims) {
  expect_parse_error(Bytes().header(1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).data(4),
                     {"'t'", "n_dims = 5"});
}

TEST(GgufErrors, UnknownTensorType) {
  expect_parse_error(Bytes().header(1, 0).tensor("t", {4}, 4, 0).data(16),
                     {"'t'", "unknown ggml type id 4"});
  expect_parse_error(Bytes().header(1, 0).tensor("t", {4}, 1000, 0).data(16),
                     {"unknown ggml type id 1000"});
}

TEST(GgufErrors, ElementCountOverflow) {
  expect_parse_error(
      Bytes().header(1, 0).tensor("big", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0).data(4),
      {"'big'", "element count overflows"});
  expect_parse_error(Bytes().header(1, 0).tensor("neg", {~uint64_t(0)}, 0, 0).data(4),
                     {"'neg'", "dimension 18446744073709551615"});
}

TEST(GgufErrors, RowNotAMultipleOfTheBlockSize) {
  expect_parse_error(Bytes().header(1, 0).tensor("q", {33, 2}, ggml::kQ8_0, 0).data(128),
                     {"'q'", "Q8_0", "rows of 33", "block size 32"});
}

TEST(GgufErrors, MisalignedOffset) {
  expect_parse_error(Bytes().header(1, 0).tensor("t", {2}, 0, 8).data(64),
                     {"'t'", "offset 8", "alignment 32"});
}

TEST(GgufErrors, OffsetOutOfTheFile) {
  expect_parse_error(Bytes().header(1, 0).tensor("t", {7}, 0, 1024).data(28),
                     {"'t'", "1024", "outside"});
  expect_parse_error(Bytes().header(1, 0).tensor("t", {7}, 0, 0).data(27), {"'t'", "outside"});
}

TEST(GgufErrors, OverlappingTensors) {
  expect_parse_error(
      Bytes().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).data(128),
      {"'b'", "overlaps 'a'"});
}

TEST(GgufErrors, DuplicateAndOverlongTensorNames) {
  expect_parse_error(Bytes().header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).data(64),
                     {"'a'", "appears twice"});
  expect_parse_error(Bytes().header(1, 0).tensor(std::string(65, 'n'), {8}, 0, 0).data(32),
                     {"tensor name", "length 65", "at most 64"});
}

}  // namespace
}  // namespace tessel::io
