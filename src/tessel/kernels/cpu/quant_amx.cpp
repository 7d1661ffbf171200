// SPDX-License-Identifier: Apache-2.0
// Q8_0 and Q4_0 weights times activation rows on Intel AMX-INT8 tiles (Intel 64 and IA-32
// Architectures Software Developer's Manual, vol. 1 ch. 20, "Intel Advanced Matrix Extensions").
// Q4_0's 4-bit codes u (weight d * (u - 8)) are expanded to the signed bytes u - 8 when a group
// is packed, after which both formats are the same product (Q4Format, Q8Format). One TDPBSSD
// multiplies a tile of 16 activation rows x one 32-code block (signed bytes) by the same block of
// 16 weight rows, packed four bytes per row side by side (the "VNNI layout" the instruction reads),
// into 16 x 16 exact int32 block sums: 8,192 multiply-adds where a 512-bit vpdpbusd does 64.
//
// The order of the f32 arithmetic is what makes the product batch-invariant: every output (i, j)
// is, for g = 0 .. k/32 - 1 in order, acc = fma(f32(S_ijg), f16(d_jg) * dx_ig, acc) from acc = +0,
// with S_ijg the exact integer dot product of block g (|S| <= 32 * 128 * 127 < 2^24: the
// conversion is exact; Q4_0's S is the sum of (u - 8) x). Nothing in it depends on the other rows,
// so a row has the same bits alone as inside any prompt. This is not the VNNI kernels' order (they
// convert eight 4-product lanes per block and add the lanes at the end, which a tile product cannot
// give), so with AMX on every m of Q8_0 and Q4_0 runs here: tiles from kTilesFrom rows, and below
// it (the decode step, where packing a group would cost more than it saves) few_rows, which forms
// the same exact block sums with vpdpbusd and then does the same f32 operations. A product's bits
// depend on the switch, never on m.
//
// The tiles run in the driver all the AMX kernels share (quant_amx_driver.h: per group of 16
// weight rows and chunk of activation rows the group is packed once, then every tile of the chunk
// runs over it); this file gives it the formats' packing (one gather per 4 bytes of 16 rows, and
// the 16 scales widened to f32) and their epilogue (Blocks).
#include "tessel/kernels/cpu/quant_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/quant_amx_common.h"
#include "tessel/kernels/cpu/quant_amx_driver.h"
#include "tessel/kernels/cpu/quant_amx_q4_0_rows.h"

namespace tessel::kernels::cpu {

namespace {

using namespace amx;

// How far ahead few_rows prefetches each weight row.
constexpr int64_t kRowPrefetchBytes = 512;

// The two formats, as the kernels below take them: a block's bytes (f16 d first), its 32 codes as
// signed bytes in VNNI layout (pack), and for few_rows its codes as unsigned bytes u = code + kBias
// (codes), whose products with x are corrected by kBias * (the block's sum of x).
// Q8_0: f16 d + 32 int8 codes; u = code ^ 0x80 = code + 128.
struct Q8Format {
  static constexpr int64_t kBlockBytes = 34;
  static constexpr int32_t kBias = 128;
  static constexpr int64_t kPrefetchEvery = 2;  // blocks between a row's prefetches (68 bytes)
  // Codes 4r..4r+3 of the 16 rows at `base` (offsets `index`) into packed row r, r = 0..7.
  TESSEL_AMX_TARGET static void pack(const uint8_t* base, __m512i index, __mmask16 real,
                                     int8_t* packed) {
    for (int r = 0; r < kBlock / 4; ++r)
      _mm512_storeu_si512(packed + r * 64, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), real,
                                                                       index, base + 2 + 4 * r, 1));
  }
  TESSEL_AMX_TARGET static __m256i codes(const uint8_t* block) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2)),
                            _mm256_set1_epi8(char(0x80)));
  }
};

// Q4_0: f16 d + 16 bytes whose low nibbles are codes 0-15 and high nibbles codes 16-31, each the
// weight's u - 8 (u = 0..15). Packed as the signed u - 8 (exact in int8), so a tile product is
// the block's exact sum of (u - 8) x; its few_rows (quant_amx_q4_0_rows.cpp) takes u itself
// (kBias = 8).
struct Q4Format {
  static constexpr int64_t kBlockBytes = 18;
  static constexpr int32_t kBias = 8;
  TESSEL_AMX_TARGET static void pack(const uint8_t* base, __m512i index, __mmask16 real,
                                     int8_t* packed) {
    const __m512i mask = _mm512_set1_epi8(0xF), eight = _mm512_set1_epi8(8);
    for (int r = 0; r < kBlock / 8; ++r) {
      const __m512i v =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), real, index, base + 2 + 4 * r, 1);
      _mm512_storeu_si512(packed + r * 64, _mm512_sub_epi8(_mm512_and_si512(v, mask), eight));
      _mm512_storeu_si512(packed + (r + 4) * 64,
                          _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi32(v, 4), mask), eight));
    }
  }
};

// Block g of the `cols` weight rows at w into packed[r][4c + b] = code 4r + b of row c (zeros
// past cols in Q8_0, -8 in Q4_0: never stored) and their f16 scales into scales[c] (f32, zeros
// past cols).
template <class F>
TESSEL_AMX_TARGET void pack_group(const uint8_t* w, int64_t row_bytes, int cols, int64_t blocks,
                                  int8_t* packed, float* scales) {
  alignas(64) int32_t offsets[kCols];
  for (int c = 0; c < kCols; ++c) offsets[c] = int32_t(c * row_bytes);
  const __m512i index = _mm512_load_si512(offsets);
  const __mmask16 real = __mmask16((1u << cols) - 1);
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t g = 0; g < blocks; ++g) {
    const uint8_t* base = w + g * F::kBlockBytes;
    const __m512i d = _mm512_mask_i32gather_epi32(zero, real, index, base, 1);
    _mm512_storeu_ps(scales + g * kCols, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
    F::pack(base, index, real, packed + g * kPacked);
  }
}

// Q8_0 and Q4_0 (C: Q8Format or Q4Format) as the tile driver takes them: a step is a block.
template <class C>
struct Blocks {
  static constexpr int kStep = kBlock;
  static constexpr int kRowValues = 1;     // dx
  static constexpr int kScaleVectors = 1;  // f16(d) widened
  TESSEL_AMX_TARGET void pack(const uint8_t* w, int64_t row_bytes, int cols, int64_t blocks,
                              int8_t* packed, float* scales) const {
    pack_group<C>(w, row_bytes, cols, blocks, packed, scales);
  }
  // acc[i] (16 outputs of activation row i) += f32(sums of block g) * (scales of g * dx[i][g]).
  template <int R>
  TESSEL_AMX_TARGET void scale(const int32_t* sums, const float* scales, const RowValues& xv,
                               int64_t blocks, int64_t g, __m512 (&acc)[kRows]) const {
    const __m512 sw = _mm512_loadu_ps(scales + g * kCols);
    const float* dx = xv.v[0];
    for (int i = 0; i < R; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums + i * kCols)),
                               _mm512_mul_ps(sw, _mm512_set1_ps(dx[i * blocks + g])), acc[i]);
  }
};

// The 16 int32 sums of l[0..15]'s eight lanes each, in row order (exact: any order gives them).
TESSEL_AMX_TARGET inline __m512i lane_sums(const __m256i (&l)[kCols]) {
  __m512i z[8];
  for (int p = 0; p < 4; ++p) {
    z[p] = _mm512_inserti64x4(_mm512_castsi256_si512(l[p]), l[p + 4], 1);
    z[4 + p] = _mm512_inserti64x4(_mm512_castsi256_si512(l[8 + p]), l[12 + p], 1);
  }
  const __m512i u0 = quads(pairs(z[0], z[1]), pairs(z[2], z[3]));
  const __m512i u1 = quads(pairs(z[4], z[5]), pairs(z[6], z[7]));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, 0x88), _mm512_shuffle_i32x4(u0, u1, 0xDD));
}

// Fewer than kTilesFrom activation rows (the decode step), where packing a group for the tiles
// costs more than it saves: per block and activation row the 16 weight rows' exact sums by
// vpdpbusd on the unsigned codes u = code + kBias against x, less kBias * (the block's sum of x)
// (`xbias`), then the tiles' f32 operations on the same values, so the bits are the tiles'.
// Weight rows past `cols` read the last real row again and are not stored.
template <class F>
TESSEL_AMX_TARGET void few_rows(const Problem& a, const int32_t* xbias, int64_t j0, int cols) {
  const uint8_t* rows[kCols];
  alignas(64) int32_t offsets[kCols];
  for (int c = 0; c < kCols; ++c) {
    offsets[c] = int32_t(std::min(c, cols - 1) * a.row_bytes);
    rows[c] = a.w + (j0 + std::min(c, cols - 1)) * a.row_bytes;
  }
  const __m512i index = _mm512_load_si512(offsets);
  const __mmask16 real = __mmask16((1u << cols) - 1);
  for (int64_t i = 0; i < a.m; ++i) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t g = 0; g < a.blocks; ++g) {
      const int64_t at = g * F::kBlockBytes;
      const __m256i x =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + i * a.k + 32 * g));
      // 16 streams of W are more than the hardware prefetcher follows: a line ahead per row
      // about once per 64 bytes of it.
      if (g % F::kPrefetchEvery == 0)
        for (int c = 0; c < kCols; ++c) _mm_prefetch(rows[c] + at + kRowPrefetchBytes, _MM_HINT_T0);
      __m256i l[kCols];
      for (int c = 0; c < kCols; ++c)
        l[c] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), F::codes(rows[c] + at), x);
      const __m512i sums =
          _mm512_sub_epi32(lane_sums(l), _mm512_set1_epi32(xbias[i * a.blocks + g]));
      const __m512i d = _mm512_i32gather_epi32(index, a.w + j0 * a.row_bytes + at, 1);
      const __m512 sw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                            _mm512_mul_ps(sw, _mm512_set1_ps(a.xv.v[0][i * a.blocks + g])), acc);
    }
    _mm512_mask_storeu_ps(a.y + i * a.n + j0, real, acc);
  }
}

// Q4_0's: four rows per 512-bit register and the activation rows sharing the unpacking
// (quant_amx_q4_0_rows.cpp), the same bits.
template <>
void few_rows<Q4Format>(const Problem& a, const int32_t* xbias, int64_t j0, int cols) {
  q4_0_amx_few_rows(a.m, a.k, a.row_bytes, a.xq, a.xv.v[0], xbias, a.w + j0 * a.row_bytes, cols,
                    a.y + j0, a.n);
}

template <class F>
void amx_matmul(const char* name, int64_t m, int64_t n, int64_t k, int64_t row_bytes,
                const int8_t* xq, const float* dx, const uint8_t* w, float* y,
                int64_t group_grain) {
  TESSEL_CHECK(k % kBlock == 0 && row_bytes == k / kBlock * F::kBlockBytes, name, ": k = ", k,
               " and row_bytes = ", row_bytes, " are not rows of its format");
  TESSEL_CHECK((kCols - 1) * row_bytes < (int64_t(1) << 31), name, ": rows of ", row_bytes,
               " bytes are too long for the 32-bit gather offsets");
  const int64_t blocks = k / kBlock;
  const Problem p{m, n, k, blocks, row_bytes, xq, {{dx, nullptr}}, w, y};
  if (m >= kTilesFrom) return tile_matmul(Blocks<F>{}, name, p, group_grain);
  std::vector<int32_t> xbias(size_t(m * blocks));
  for (int64_t i = 0; i < m * blocks; ++i) {
    int32_t sum = 0;
    for (int c = 0; c < kBlock; ++c) sum += xq[i * kBlock + c];
    xbias[size_t(i)] = F::kBias * sum;
  }
  each_group(n, group_grain, [&](int64_t j0, int cols) { few_rows<F>(p, xbias.data(), j0, cols); });
}

}  // namespace

void q8_0_amx_matmul(int64_t m, int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq,
                     const float* dx, const uint8_t* w, float* y, int64_t group_grain) {
  amx_matmul<Q8Format>("q8_0_amx_matmul", m, n, k, row_bytes, xq, dx, w, y, group_grain);
}

void q4_0_amx_matmul(int64_t m, int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq,
                     const float* dx, const uint8_t* w, float* y, int64_t group_grain) {
  amx_matmul<Q4Format>("q4_0_amx_matmul", m, n, k, row_bytes, xq, dx, w, y, group_grain);
}

}  // namespace tessel::kernels::cpu
