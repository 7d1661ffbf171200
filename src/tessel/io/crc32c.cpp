// SPDX-License-Identifier: Apache-2.0
// CRC-32C (Castagnoli's polynomial, as in iSCSI, RFC 3720) for checkpoint manifests and TFRecord
// framing. Where the compiler targets SSE4.2 it runs on the crc32 instruction, three interleaved
// streams at a time; otherwise on slice-by-8 tables (eight table lookups fold in eight bytes per
// step).
#include "tessel/io/crc32c.h"

#include <array>
#include <cstdint>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace tessel::io {
namespace detail {

namespace {

using Crc32cTables = std::array<std::array<uint32_t, 256>, 8>;

// Table k advances the CRC over a byte followed by k zero bytes, so eight bytes fold in at once.
constexpr Crc32cTables make_crc32c_tables() {
  Crc32cTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
  return t;
}

constexpr Crc32cTables kCrc32cTables = make_crc32c_tables();

}  // namespace

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  const auto& t = kCrc32cTables;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian: the first byte is the lowest
    w ^= c;
    c = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
  }
  for (; size > 0; --size) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

}  // namespace detail

#if defined(__SSE4_2__)
namespace {

// The crc32 instruction has a latency of three cycles but a throughput of one, so three
// independent streams over adjacent spans run about three times faster than one; the three
// partial CRCs are then joined by advancing the earlier ones over the length of the later spans.
constexpr size_t kLongSpan = 8192, kShortSpan = 256;

// Advancing a CRC register over n zero bytes is linear in the register; these tables apply that
// map a byte of the register at a time.
struct ZeroShift {
  uint32_t table[4][256];
  explicit ZeroShift(size_t n) {
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      uint64_t c = uint32_t(1) << bit;
      for (size_t i = 0; i < n; i += 8) c = _mm_crc32_u64(c, 0);
      basis[bit] = uint32_t(c);
    }
    for (int k = 0; k < 4; ++k) {
      for (int b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if ((b >> bit) & 1) v ^= basis[8 * k + bit];
        }
        table[k][b] = v;
      }
    }
  }
  uint32_t operator()(uint32_t c) const {
    return table[0][c & 0xFF] ^ table[1][(c >> 8) & 0xFF] ^ table[2][(c >> 16) & 0xFF] ^
           table[3][c >> 24];
  }
};

uint64_t load64(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

// Consumes whole groups of three `span`-byte spans.
uint32_t crc32c_3way(const uint8_t*& p, size_t& size, uint32_t c, size_t span,
                     const ZeroShift& shift) {
  for (; size >= 3 * span; size -= 3 * span, p += 2 * span) {
    uint64_t c0 = c, c1 = 0, c2 = 0;
    for (const uint8_t* end = p + span; p < end; p += 8) {
      c0 = _mm_crc32_u64(c0, load64(p));
      c1 = _mm_crc32_u64(c1, load64(p + span));
      c2 = _mm_crc32_u64(c2, load64(p + 2 * span));
    }
    c = shift(shift(uint32_t(c0)) ^ uint32_t(c1)) ^ uint32_t(c2);
  }
  return c;
}

}  // namespace
#endif

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#if defined(__SSE4_2__)
  static const ZeroShift long_shift(kLongSpan), short_shift(kShortSpan);
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --size) c = _mm_crc32_u8(c, *p++);
  c = crc32c_3way(p, size, c, kLongSpan, long_shift);
  c = crc32c_3way(p, size, c, kShortSpan, short_shift);
  uint64_t c64 = c;
  for (; size >= 8; size -= 8, p += 8) c64 = _mm_crc32_u64(c64, load64(p));
  c = uint32_t(c64);
  for (; size > 0; --size) c = _mm_crc32_u8(c, *p++);
  return ~c;
#else
  return detail::crc32c_portable(data, size, crc);
#endif
}

}  // namespace tessel::io
