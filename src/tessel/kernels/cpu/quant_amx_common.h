// SPDX-License-Identifier: Apache-2.0
// What the AMX-INT8 quantized kernels (quant_amx.cpp: Q8_0 / Q4_0, quant_amx_k.cpp: Q4_K / Q5_K,
// quant_amx_q6_k.cpp: Q6_K) share besides their driver (quant_amx_driver.h): the target of their
// functions, the tile configuration record, 32-bit gathers from a group of 16 weight rows (one row
// per lane) and the exact transpose-add of 16 rows' dot-product lanes. Kernel-private: included by
// those files only.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

// GCC 12's AVX-512 intrinsics start many results from a self-initialised "undefined" vector, which
// -W(maybe-)uninitialized reports once they are inlined into a function with its own target.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define TESSEL_AMX_TARGET \
  __attribute__((         \
      target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,amx-tile,amx-int8")))

namespace tessel::kernels::cpu::amx {

inline constexpr int kRows = 16;  // activation rows per tile
inline constexpr int kCols = 16;  // weight rows per group
inline constexpr int64_t kBlock = 32;
inline constexpr int64_t kSuper = 256;
inline constexpr int64_t kPacked = kBlock * kCols;  // one block of a group in tile layout
inline constexpr int64_t kChunkBytes = int64_t(1) << 19;
// From this many activation rows the tiles; below, the few-rows kernels (the same bits).
inline constexpr int64_t kTilesFrom = 4;

// The palette-1 configuration (Intel SDM, LDTILECFG): rows and bytes per row of each tile.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tmm0 / tmm3: `rows` activation rows of `k_bytes` codes; tmm1 / tmm4: the same codes of 16
// weight rows, four per 32-bit column; tmm2 / tmm5: their rows x 16 int32 sums.
inline TileConfig tile_config(int k_bytes, int rows) {
  TileConfig c;
  for (int t : {0, 3}) c.rows[t] = uint8_t(rows), c.colsb[t] = uint16_t(k_bytes);
  for (int t : {1, 4}) c.rows[t] = uint8_t(k_bytes / 4), c.colsb[t] = 4 * kCols;
  for (int t : {2, 5}) c.rows[t] = uint8_t(rows), c.colsb[t] = 4 * kCols;
  return c;
}

// The lanes of a group of 16 weight rows: byte offsets c * row_bytes, and which rows are real.
struct Lanes {
  __m512i index;
  __mmask16 real;
};

TESSEL_AMX_TARGET inline Lanes lanes(int64_t row_bytes, int cols) {
  alignas(64) int32_t offsets[kCols];
  for (int c = 0; c < kCols; ++c) offsets[c] = int32_t(c * row_bytes);
  return {_mm512_load_si512(offsets), __mmask16((1u << cols) - 1)};
}

// The 32-bit word at p of each real row (zero in the others).
TESSEL_AMX_TARGET inline __m512i gather(const Lanes& l, const uint8_t* p) {
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), l.real, l.index, p, 1);
}

// Within each 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3], then the four totals.
TESSEL_AMX_TARGET inline __m512i pairs(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
TESSEL_AMX_TARGET inline __m512i quads(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// l[c]: weight row c's 16 int32 lanes. u[q]: 128-bit lane t holds rows 4q .. 4q + 3, each summed
// over its lanes 4t .. 4t + 3 (exact: any order gives the same integers).
TESSEL_AMX_TARGET inline void quad_sums(const __m512i (&l)[kCols], __m512i (&u)[4]) {
  for (int q = 0; q < 4; ++q)
    u[q] = quads(pairs(l[4 * q], l[4 * q + 1]), pairs(l[4 * q + 2], l[4 * q + 3]));
}

// How far ahead the few-rows kernels prefetch each weight row.
inline constexpr int64_t kPrefetchBytes = 576;

// The few-rows kernels read a group's 16 rows side by side, 16 streams of W, more than the
// hardware prefetcher followed. Each row is fetched kPrefetchBytes ahead of the super-block at
// `at` as a stream that goes on in the same row of the next groups (16 rows further each), so
// short rows are fetched a group or two ahead: the distance, from row c of this group to where
// that stream is kPrefetchBytes later.
inline int64_t prefetch_distance(int64_t at, int64_t row_bytes) {
  const int64_t v = at + kPrefetchBytes;
  return (v / row_bytes) * kCols * row_bytes + v % row_bytes - at;
}

// `bytes` from p on (none past `end`).
TESSEL_AMX_TARGET inline void prefetch(const uint8_t* p, int64_t bytes, const uint8_t* end) {
  for (int64_t o = 0; o < bytes && p + o < end; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

}  // namespace tessel::kernels::cpu::amx
