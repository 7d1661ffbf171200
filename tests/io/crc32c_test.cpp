// SPDX-License-Identifier: Apache-2.0
// CRC-32C against published values (RFC 3720) and an independent bit-at-a-time reference: the
// hardware path and the table path agree on unaligned, short, long and chained buffers.
#include "tessel/io/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tessel::io {
namespace {

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng() & 0xFF);
  return s;
}

uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

TEST(Crc32c, KnownAnswers) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[size_t(i)] = uint8_t(i), down[size_t(i)] = uint8_t(31 - i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(detail::crc32c_portable("123456789", 9, 0), 0xE3069283u);
}

TEST(Crc32c, UnalignedShortBuffersAgreeWithTableAndBitwise) {
  std::string buf = random_bytes(33 + 8, 7);
  const auto* base = reinterpret_cast<const uint8_t*>(buf.data());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n <= 33; ++n) {
      uint32_t want = crc32c_bitwise(base + offset, n);
      EXPECT_EQ(crc32c(base + offset, n), want) << "offset " << offset << " n " << n;
      EXPECT_EQ(detail::crc32c_portable(base + offset, n, 0), want)
          << "offset " << offset << " n " << n;
    }
  }
}

TEST(Crc32c, ChainsAcrossCalls) {
  std::string buf = random_bytes(100003, 13);
  uint32_t whole = crc32c(buf.data(), buf.size());
  EXPECT_EQ(whole, crc32c_bitwise(reinterpret_cast<const uint8_t*>(buf.data()), buf.size()));
  uint32_t c = 0;
  size_t at = 0;
  for (size_t piece : {7, 13, 33, 1, 4099}) {
    c = crc32c(buf.data() + at, piece, c);
    at += piece;
  }
  c = crc32c(buf.data() + at, buf.size() - at, c);
  EXPECT_EQ(c, whole);
  EXPECT_EQ(detail::crc32c_portable(buf.data() + 7, buf.size() - 7,
                                    detail::crc32c_portable(buf.data(), 7, 0)),
            whole);
}

TEST(Crc32c, LongBuffersAgreeWithTable) {
  // Lengths around the interleaved paths' group sizes (3 x 256 and 3 x 8192 bytes), unaligned.
  std::string buf = random_bytes(3 * 8192 * 2 + 33, 21);
  for (size_t n :
       {767, 768, 769, 3 * 256 + 7, 24575, 24576, 24577, 24576 + 768 + 13, 3 * 8192 * 2 + 30}) {
    EXPECT_EQ(crc32c(buf.data() + 3, n), detail::crc32c_portable(buf.data() + 3, n, 0)) << n;
  }
}

}  // namespace
}  // namespace tessel::io
