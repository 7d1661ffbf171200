// SPDX-License-Identifier: Apache-2.0
// Q6_K weights times activation rows on Intel AMX-INT8 tiles (Intel SDM vol. 1 ch. 20), as
// quant_amx_k.cpp does Q4_K / Q5_K. A Q6_K super-block of 256 weights is w = d * sc[s] * (q - 32)
// with q of 6 bits and an int8 scale sc[s] per 16 weights, so each 32-weight activation block g
// meets two sub-blocks (halves e = 0, 1) and
//   y = sum_g sum_e  f32(S_ge) * (f32(d sc_ge) * dx[g])
// with S_ge the exact integer dot product of the half's signed codes q - 32 (-32..31, a signed
// byte) with its 16 activation codes. One TDPBSSD with K = 16 gives S_ge for 16 activation rows
// x 16 weight rows; two per block, scaled in AVX-512 as the other AMX kernels do.
//
// The f32 order, which makes the product batch-invariant: every output is, for g = 0 .. k/32 - 1
// and e = 0, 1 in order, acc = fma(f32(S_ge), f32(d sc_ge) * dx_g, acc) from +0 (d sc: one f32
// product of the widened f16 and the int8 scale). It is not the VNNI kernels' order, so with AMX
// on every m runs here: tiles from kTilesFrom rows, few_rows below (the same integer sums, from
// vpdpbusd on the unsigned codes less 32 times the half's activation sum, and the same f32
// operations). |S| <= 16 * 32 * 127 < 2^24: exact.
//
// The tiles run in the driver all the AMX kernels share (quant_amx_driver.h), a step being half a
// block (K = 16); this file gives it the packing (per super-block, a 32-bit gather of ql and of qh
// from 16 rows gives four codes of each row for two blocks: low and high nibbles, qh's bit pairs
// moved to bits 4-5; the 16 scales decoded across the rows, four gathers, one row per lane) and
// the epilogue (Q6Format).
#include <algorithm>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/quant_amx_common.h"
#include "tessel/kernels/cpu/quant_amx_driver.h"
#include "tessel/kernels/cpu/quant_amx_k.h"

namespace tessel::kernels::cpu {

namespace {

using namespace amx;

constexpr int64_t kBytes = 210;  // sizeof(quant::BlockQ6_K): ql, qh, 16 scales, d
constexpr int kHalves = 16;      // sub-blocks of 16 weights per super-block
constexpr int64_t kHalf = 16;

// sc[16 s + c] = d_c * scale_c[s] for the 16 sub-blocks s of the super-block at p (row 0; zeros
// past the real rows). d is read as the top half of the word at 206, inside the block.
TESSEL_AMX_TARGET void group_scales(const Lanes& l, const uint8_t* p, float* sc) {
  const __m512 d =
      _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(gather(l, p + 206), 16)));
  for (int q = 0; q < 4; ++q) {
    const __m512i v = gather(l, p + 192 + 4 * q);
    for (int t = 0; t < 4; ++t) {
      const __m512i s8 = _mm512_srai_epi32(_mm512_slli_epi32(v, unsigned(24 - 8 * t)), 24);
      _mm512_storeu_ps(sc + kCols * (4 * q + t), _mm512_mul_ps(_mm512_cvtepi32_ps(s8), d));
    }
  }
}

// The group's signed codes q - 32 of the super-block at p in tile layout: packed[g][r][4c + e] =
// code 4r + e of block g of row c, for its 8 blocks (g = 4h + quarter).
TESSEL_AMX_TARGET void pack_super(const Lanes& l, const uint8_t* p, int8_t* packed) {
  const __m512i nib = _mm512_set1_epi8(0x0F), two = _mm512_set1_epi8(0x03);
  const __m512i zero_point = _mm512_set1_epi8(32);
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < kBlock / 4; ++r) {
      const __m512i hq = gather(l, p + 128 + 32 * h + 4 * r);
      for (int odd = 0; odd < 2; ++odd) {
        const __m512i v = gather(l, p + 64 * h + 32 * odd + 4 * r);
        for (int quarter = odd; quarter < 4; quarter += 2) {
          const __m512i low = quarter < 2 ? _mm512_and_si512(v, nib)
                                          : _mm512_and_si512(_mm512_srli_epi32(v, 4), nib);
          const __m512i top = _mm512_slli_epi32(
              _mm512_and_si512(_mm512_srli_epi32(hq, unsigned(2 * quarter)), two), 4);
          _mm512_storeu_si512(packed + (4 * h + quarter) * kPacked + r * 64,
                              _mm512_sub_epi8(_mm512_or_si512(low, top), zero_point));
        }
      }
    }
}

// Q6_K as the tile driver takes it: a step is half a block (16 codes), each with its own scale
// d * sc (16 rows), the steps' scales in order.
struct Q6Format {
  static constexpr int kStep = kHalf;
  static constexpr int kRowValues = 1;     // dx
  static constexpr int kScaleVectors = 2;  // one per half
  TESSEL_AMX_TARGET void pack(const uint8_t* w, int64_t row_bytes, int cols, int64_t blocks,
                              int8_t* packed, float* scales) const {
    const Lanes l = lanes(row_bytes, cols);
    for (int64_t b = 0; b < blocks / 8; ++b) {
      pack_super(l, w + b * kBytes, packed + 8 * b * kPacked);
      group_scales(l, w + b * kBytes, scales + kHalves * b * kCols);
    }
  }
  // acc[i] (16 outputs of activation row i) += f32(sums of half e) * (sc * dx of its block g).
  template <int R>
  TESSEL_AMX_TARGET void scale(const int32_t* sums, const float* scales, const RowValues& xv,
                               int64_t blocks, int64_t e, __m512 (&acc)[kRows]) const {
    const __m512 sw = _mm512_loadu_ps(scales + e * kCols);
    const float* dx = xv.v[0] + e / 2;
    for (int i = 0; i < R; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums + i * kCols)),
                               _mm512_mul_ps(sw, _mm512_set1_ps(dx[i * blocks])), acc[i]);
  }
};

// Quarters 2r (low half) and 2r + 1 (high half) of half h of the super-block at p: unsigned 6-bit
// codes (masked 16-bit shifts put qh's bit pairs in place, as quant_k_tiles512.h does).
TESSEL_AMX_TARGET inline __m512i codes(const uint8_t* p, int h, int r) {
  constexpr __mmask32 kLowWords = 0x0000FFFFu, kHighWords = 0xFFFF0000u;
  const __m512i mask = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
  const __m512i ab = _mm512_loadu_si512(p + 64 * h);
  const __m512i hv = _mm512_broadcast_i64x4(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h)));
  if (r == 0) {
    const __m512i h01 = _mm512_mask_slli_epi16(_mm512_slli_epi16(hv, 2), kLowWords, hv, 4);
    return _mm512_or_si512(_mm512_and_si512(ab, mask), _mm512_and_si512(h01, top));
  }
  const __m512i h23 = _mm512_mask_srli_epi16(hv, kHighWords, hv, 2);
  return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ab, 4), mask),
                         _mm512_and_si512(h23, top));
}

// Fewer than kTilesFrom activation rows (the decode step): per activation row and pair of blocks
// each weight row's vpdpbusd, its lanes summed per half and row, less 32 times the half's
// activation sum, then the tiles' f32 operations. Rows past `cols` read the last real row.
TESSEL_AMX_TARGET void few_rows(const Problem& a, const int32_t* x32s, int64_t j0, int cols) {
  const Lanes l = lanes(a.row_bytes, cols);
  const uint8_t* base = a.w + j0 * a.row_bytes;
  const uint8_t* rows[kCols];
  for (int c = 0; c < kCols; ++c) rows[c] = base + std::min(c, cols - 1) * a.row_bytes;
  alignas(64) float sc[kHalves * kCols];
  const int64_t supers = a.k / kSuper;
  const uint8_t* end = a.w + a.n * a.row_bytes;
  for (int64_t i = 0; i < a.m; ++i) {
    const float* dx = a.xv.v[0] + i * a.blocks;
    const int32_t* x32 = x32s + i * 2 * a.blocks;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < supers; ++b) {
      const int64_t at = b * kBytes;
      const int64_t ahead = at + prefetch_distance(at, a.row_bytes);
      for (int c = 0; c < kCols; ++c) prefetch(rows[c] + ahead, kBytes, end);
      group_scales(l, base + at, sc);
      const int8_t* x = a.xq + i * a.k + b * kSuper;
      for (int h = 0; h < 2; ++h)
        for (int r = 0; r < 2; ++r) {
          const __m512i xx = _mm512_loadu_si512(x + 128 * h + 64 * r);
          __m512i lane[kCols];
          for (int c = 0; c < kCols; ++c)
            lane[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes(rows[c] + at, h, r), xx);
          __m512i u[4];
          quad_sums(lane, u);
          const __m512i lo01 = _mm512_shuffle_i32x4(u[0], u[1], 0x44);
          const __m512i hi01 = _mm512_shuffle_i32x4(u[0], u[1], 0xEE);
          const __m512i lo23 = _mm512_shuffle_i32x4(u[2], u[3], 0x44);
          const __m512i hi23 = _mm512_shuffle_i32x4(u[2], u[3], 0xEE);
          // halves t = 0..3: block g's two, then block g + 1's, rows in lane order
          const __m512i half[4] = {
              _mm512_shuffle_i32x4(lo01, lo23, 0x88), _mm512_shuffle_i32x4(lo01, lo23, 0xDD),
              _mm512_shuffle_i32x4(hi01, hi23, 0x88), _mm512_shuffle_i32x4(hi01, hi23, 0xDD)};
          const int64_t g = kSuper / kBlock * b + 4 * h + 2 * r;
          for (int t = 0; t < 4; ++t) {
            const int64_t gt = g + t / 2, s = 2 * gt + t % 2;
            const __m512i sum = _mm512_sub_epi32(half[t], _mm512_set1_epi32(x32[s]));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                                  _mm512_mul_ps(_mm512_loadu_ps(sc + kCols * (8 * h + 4 * r + t)),
                                                _mm512_set1_ps(dx[gt])),
                                  acc);
          }
        }
    }
    _mm512_mask_storeu_ps(a.y + i * a.n + j0, l.real, acc);
  }
}

}  // namespace

void q6_k_amx_matmul(int64_t m, int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq,
                     const float* dx, const uint8_t* w, float* y, int64_t group_grain) {
  TESSEL_CHECK(k % kSuper == 0 && row_bytes == k / kSuper * kBytes, "q6_k_amx_matmul: k = ", k,
               " and row_bytes = ", row_bytes, " are not Q6_K rows");
  TESSEL_CHECK((kCols - 1) * row_bytes < (int64_t(1) << 31), "q6_k_amx_matmul: rows of ", row_bytes,
               " bytes are too long for the 32-bit gather offsets");
  const int64_t blocks = k / kBlock;
  const Problem p{m, n, k, blocks, row_bytes, xq, {{dx, nullptr}}, w, y};
  if (m >= kTilesFrom) return tile_matmul(Q6Format{}, "q6_k_amx_matmul", p, group_grain);
  std::vector<int32_t> x32(size_t(m * 2 * blocks));
  for (int64_t h = 0; h < m * 2 * blocks; ++h) {
    int32_t sum = 0;
    for (int64_t c = 0; c < kHalf; ++c) sum += xq[h * kHalf + c];
    x32[size_t(h)] = 32 * sum;
  }
  each_group(n, group_grain, [&](int64_t j0, int cols) { few_rows(p, x32.data(), j0, cols); });
}

}  // namespace tessel::kernels::cpu
