// SPDX-License-Identifier: Apache-2.0
// The byte layouts of ggml's quantized blocks (ggml-common.h of ggml / GGUF; the k-quants are
// from llama.cpp's k-quants work), and accessors for single elements that spell the layouts out
// once. Multi-byte fields are little-endian, as GGUF stores them; the f16 fields are raw IEEE
// half bits. Nothing here is fast: the kernels decode whole blocks their own way
// (kernels/cpu/quant_decode.h) and are tested against these accessors.
#pragma once

#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels::quant {

inline constexpr int kQBlock = 32;   // weights per Q8_0 / Q4_0 block
inline constexpr int kKBlock = 256;  // weights per k-quant super-block

// Q8_0: x = d * qs[j].
struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kQBlock];
};

// Q4_0: x = d * (nibble - 8); element j < 16 is the low nibble of qs[j], element j + 16 its high
// nibble.
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[kQBlock / 2];
};

// Q4_K: 8 sub-blocks of 32 weights, x = d * sc[s] * q - dmin * m[s], with 6-bit sc and m packed in
// `scales` (q4k_scale / q4k_min). Elements 64c .. 64c+31 (sub-block 2c) are the low nibbles of
// qs[32c .. 32c+31], elements 64c+32 .. 64c+63 (sub-block 2c+1) their high nibbles.
struct BlockQ4_K {
  uint16_t d;     // f16, scale of the sub-block scales
  uint16_t dmin;  // f16, scale of the sub-block mins
  uint8_t scales[12];
  uint8_t qs[kKBlock / 2];
};

// Q5_K: as Q4_K (the same d, dmin and 6-bit scale / min packing, the same low-nibble order in
// qs), with a fifth bit per weight in qh: element 64c + l (l < 32) takes bit 2c of qh[l], element
// 64c + 32 + l bit 2c + 1, each worth 16. x = d * sc[s] * q - dmin * m[s], q in 0..31.
struct BlockQ5_K {
  uint16_t d;     // f16
  uint16_t dmin;  // f16
  uint8_t scales[12];
  uint8_t qh[kKBlock / 8];
  uint8_t qs[kKBlock / 2];
};

// Q6_K: 16 sub-blocks of 16 weights, x = d * scales[e / 16] * (q - 32) with q of 6 bits: 4 in ql,
// 2 in qh. Each half h of 128 elements uses ql[64h ..], qh[32h ..]; its element 32p + l (quarter
// p, l < 32) takes the low nibble of ql[64h + l] (p = 0), of ql[64h + 32 + l] (p = 1), the high
// nibbles of the same bytes (p = 2, 3), and bits 2p, 2p+1 of qh[32h + l] as its top two bits.
struct BlockQ6_K {
  uint8_t ql[kKBlock / 2];
  uint8_t qh[kKBlock / 4];
  int8_t scales[kKBlock / 16];
  uint16_t d;  // f16
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

inline float half_bits_to_float(uint16_t bits) {
  return f16_to_float(F16{bits});
}

// Q4_K's 12 scale bytes hold eight 6-bit scales and eight 6-bit mins: sub-blocks 0-3 keep theirs
// in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 keep their low 4 bits in
// the nibbles of bytes 8-11 (scale low, min high) and their top 2 bits in the top bits of bytes
// 0-3 (scales) and 4-7 (mins).
inline int q4k_scale(const uint8_t* s, int sub) {
  if (sub < 4) return s[sub] & 63;
  return (s[sub + 4] & 0xF) | ((s[sub - 4] >> 6) << 4);
}
inline int q4k_min(const uint8_t* s, int sub) {
  if (sub < 4) return s[sub + 4] & 63;
  return (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
}
// The inverse: packs sc[8] and m[8] (each < 64).
inline void q4k_pack_scales(const int sc[8], const int m[8], uint8_t s[12]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

// The 4-bit code (0..15) of element e (0..255) of a Q4_K block.
inline int q4k_code(const BlockQ4_K& b, int e) {
  const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
  return (e % 64) < 32 ? byte & 0xF : byte >> 4;
}

// The 5-bit code (0..31) of element e (0..255) of a Q5_K block.
inline int q5k_code(const BlockQ5_K& b, int e) {
  const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
  const int low = (e % 64) < 32 ? byte & 0xF : byte >> 4;
  const int high = (b.qh[e % 32] >> (e / 32)) & 1;
  return low | (high << 4);
}

// Stores code q (0..31) as element e of a Q5_K block (the other bits of its bytes are kept).
inline void q5k_set_code(BlockQ5_K& b, int e, int q) {
  uint8_t& byte = b.qs[32 * (e / 64) + e % 32];
  byte = (e % 64) < 32 ? uint8_t((byte & 0xF0) | (q & 0xF))
                       : uint8_t((byte & 0x0F) | ((q & 0xF) << 4));
  uint8_t& hi = b.qh[e % 32];
  hi = uint8_t((hi & ~(1 << (e / 32))) | (((q >> 4) & 1) << (e / 32)));
}

// The 6-bit code (0..63) of element e (0..255) of a Q6_K block.
inline int q6k_code(const BlockQ6_K& b, int e) {
  const int h = e / 128, p = (e % 128) / 32, l = e % 32;
  const uint8_t low = b.ql[64 * h + 32 * (p & 1) + l];
  const int nibble = p < 2 ? low & 0xF : low >> 4;
  const int top = (b.qh[32 * h + l] >> (2 * p)) & 3;
  return nibble | (top << 4);
}

// Stores code q (0..63) as element e of a Q6_K block (the other bits of its bytes are kept).
inline void q6k_set_code(BlockQ6_K& b, int e, int q) {
  const int h = e / 128, p = (e % 128) / 32, l = e % 32;
  uint8_t& low = b.ql[64 * h + 32 * (p & 1) + l];
  low = p < 2 ? uint8_t((low & 0xF0) | (q & 0xF)) : uint8_t((low & 0x0F) | ((q & 0xF) << 4));
  uint8_t& hi = b.qh[32 * h + l];
  hi = uint8_t((hi & ~(3 << (2 * p))) | (((q >> 4) & 3) << (2 * p)));
}

}  // namespace tessel::kernels::quant
