// SPDX-License-Identifier: Apache-2.0
// Q4_K and Q5_K weights times activation rows on Intel AMX-INT8 tiles (Intel SDM vol. 1 ch. 20,
// "Intel Advanced Matrix Extensions"), the k-quant counterpart of quant_amx.cpp's Q8_0 tiles.
// A k-quant row is super-blocks of 256 weights, w = d * sc[s] * u - dmin * mn[s] for sub-block s
// of 32 weights (u in 0..15, Q5_K 0..31; sc, mn 6-bit). The activations are rounded per 32 as for
// every quantized type (quant_dot.h), so a sub-block meets exactly one activation block g and
//   y = sum_g  dx[g] * (d sc[g]) * S_g  -  (dmin mn[g]) * xs[g]
// with S_g the exact integer dot product of the block's codes with its activation codes and xs[g]
// = dx[g] * (sum of those codes) (quant_fused.h's activation_block_sums). One TDPBSSD gives S_g
// for 16 activation rows x 16 weight rows (the codes fit a signed byte); the scales and the mins'
// term are f32 work per block in AVX-512, as for Q8_0.
//
// The f32 order, which makes the product batch-invariant: every output (i, j) is, for g = 0 ..
// k/32 - 1 in order, acc = fma(f32(S_ijg), f32(d_j sc_jg) * dx_ig, acc) then acc = acc -
// f32(dmin_j mn_jg) * xs_ig as one fused multiply-add, from acc = +0 (d_j sc_jg: one f32 product
// of the widened f16 and the 6-bit integer). Nothing depends on the other rows, so a row has the
// same bits alone as inside any prompt; it is not the VNNI kernels' order (eight lanes per block,
// the mins in a sum of their own), so with AMX on every m runs here: tiles from kTilesFrom rows,
// and below it (the decode step) few_rows, which forms the same block sums with vpdpbusd straight
// from the packed rows and does the same f32 operations. |S| <= 32 * 31 * 127 < 2^24: exact.
//
// The tiles run in the driver all the AMX kernels share (quant_amx_driver.h); this file gives it
// the packing (per super-block, the four bytes of a 32-bit gather from 16 rows are four codes of
// each row for two blocks: low nibbles for sub-block 2c, high nibbles for 2c + 1, Q5_K's fifth
// bits or-ed in; scales and mins decoded across the 16 rows, three 32-bit gathers of the 12 scale
// bytes, each lane a row, into f32 vectors) and the epilogue (KFormat).
#include "tessel/kernels/cpu/quant_amx_k.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/quant_amx_common.h"
#include "tessel/kernels/cpu/quant_amx_driver.h"

namespace tessel::kernels::cpu {

namespace {

using namespace amx;

constexpr int kSubs = 8;  // sub-blocks per super-block

// Where the fields of a super-block lie: d and dmin at 0, the 12 scale bytes at 4, Q5_K's fifth
// bits at 16, the nibbles at qs.
struct Format {
  bool five;
  int64_t bytes, qs;
};

Format format(bool five) {
  return five ? Format{true, 176, 48} : Format{false, 144, 16};
}

// (v >> shift) & mask per 32-bit lane.
TESSEL_AMX_TARGET inline __m512i bits(__m512i v, int shift, __m512i mask) {
  return _mm512_and_si512(_mm512_srli_epi32(v, unsigned(shift)), mask);
}

// out[0..15] = f32(v) * f.
TESSEL_AMX_TARGET inline void put(float* out, __m512i v, __m512 f) {
  _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(v), f));
}

// Super-block at p (of row 0; the others l.index apart) of the group: sc[16 s + c] = d_c *
// scale_c[s] and off[16 s + c] = dmin_c * min_c[s] for the 8 sub-blocks s (zeros past the real
// rows). The 12 bytes are three words per row, one row per lane: bytes 0-3 hold scales 0-3 (low 6
// bits) and the top 2 bits of scales 4-7, bytes 4-7 the same for the mins, bytes 8-11 the low 4
// bits of scales 4-7 (low nibbles) and mins 4-7 (high nibbles).
TESSEL_AMX_TARGET void group_scales(const Lanes& l, const uint8_t* p, float* sc, float* off) {
  const __m512i dd = gather(l, p);
  const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
  const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
  const __m512i w0 = gather(l, p + 4), w1 = gather(l, p + 8), w2 = gather(l, p + 12);
  const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
  for (int s = 0; s < 4; ++s) {
    put(sc + kCols * s, bits(w0, 8 * s, m6), d);
    put(off + kCols * s, bits(w1, 8 * s, m6), dmin);
    const __m512i hi_sc = _mm512_slli_epi32(bits(w0, 8 * s + 6, m2), 4);
    const __m512i hi_mn = _mm512_slli_epi32(bits(w1, 8 * s + 6, m2), 4);
    put(sc + kCols * (s + 4), _mm512_or_si512(bits(w2, 8 * s, m4), hi_sc), d);
    put(off + kCols * (s + 4), _mm512_or_si512(bits(w2, 8 * s + 4, m4), hi_mn), dmin);
  }
}

// The group's codes of super-block b (row 0 at p) in tile layout: packed[g][r][4c + e] = code 4r +
// e of sub-block g of row c, for the 8 sub-blocks g of b (zeros past the real rows).
TESSEL_AMX_TARGET void pack_super(const Lanes& l, const Format& f, const uint8_t* p,
                                  int8_t* packed) {
  const __m512i nib = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(0x01);
  __m512i high[kBlock / 4];
  if (f.five)
    for (int r = 0; r < kBlock / 4; ++r) high[r] = gather(l, p + 16 + 4 * r);
  for (int c = 0; c < kSubs / 2; ++c)
    for (int r = 0; r < kBlock / 4; ++r) {
      const __m512i v = gather(l, p + f.qs + 32 * c + 4 * r);
      __m512i lo = _mm512_and_si512(v, nib);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), nib);
      if (f.five) {
        lo = _mm512_or_si512(
            lo, _mm512_slli_epi32(
                    _mm512_and_si512(_mm512_srli_epi32(high[r], unsigned(2 * c)), one), 4));
        hi = _mm512_or_si512(
            hi, _mm512_slli_epi32(
                    _mm512_and_si512(_mm512_srli_epi32(high[r], unsigned(2 * c + 1)), one), 4));
      }
      _mm512_storeu_si512(packed + (2 * c) * kPacked + r * 64, lo);
      _mm512_storeu_si512(packed + (2 * c + 1) * kPacked + r * 64, hi);
    }
}

// Q4_K / Q5_K as the tile driver takes them: a step is a block; the scales are d * sc of each
// block (16 rows) and then dmin * mn of each block.
struct KFormat {
  static constexpr int kStep = kBlock;
  static constexpr int kRowValues = 2;     // dx, xs
  static constexpr int kScaleVectors = 2;  // sc, off
  Format f;
  TESSEL_AMX_TARGET void pack(const uint8_t* w, int64_t row_bytes, int cols, int64_t blocks,
                              int8_t* packed, float* scales) const {
    const Lanes l = lanes(row_bytes, cols);
    float* off = scales + blocks * kCols;
    for (int64_t b = 0; b < blocks / kSubs; ++b) {
      pack_super(l, f, w + b * f.bytes, packed + kSubs * b * kPacked);
      group_scales(l, w + b * f.bytes, scales + kSubs * b * kCols, off + kSubs * b * kCols);
    }
  }
  // acc[i] (16 outputs of activation row i) gets block g: fma(f32(S), sc * dx, acc), then minus
  // off * xs as one fma.
  template <int R>
  TESSEL_AMX_TARGET void scale(const int32_t* sums, const float* scales, const RowValues& xv,
                               int64_t blocks, int64_t g, __m512 (&acc)[kRows]) const {
    const __m512 sw = _mm512_loadu_ps(scales + g * kCols);
    const __m512 ow = _mm512_loadu_ps(scales + (blocks + g) * kCols);
    const float *dx = xv.v[0], *xs = xv.v[1];
    for (int i = 0; i < R; ++i) {
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums + i * kCols)),
                               _mm512_mul_ps(sw, _mm512_set1_ps(dx[i * blocks + g])), acc[i]);
      acc[i] = _mm512_fnmadd_ps(ow, _mm512_set1_ps(xs[i * blocks + g]), acc[i]);
    }
  }
};

// l[c]: weight row c's 16 lanes, 0-7 from one block, 8-15 from the next. first / second: the
// two blocks' sums of the 16 rows, row c in lane c.
TESSEL_AMX_TARGET inline void block_sums(const __m512i (&l)[kCols], __m512i& first,
                                         __m512i& second) {
  __m512i u[4];
  quad_sums(l, u);
  const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88),
                                       _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
  const __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x88),
                                       _mm512_shuffle_i32x4(u[2], u[3], 0xDD));
  first = _mm512_shuffle_i32x4(s01, s23, 0x88);
  second = _mm512_shuffle_i32x4(s01, s23, 0xDD);
}

// Sub-blocks 2c (low half) and 2c + 1 (high half) of the super-block at p, as unsigned bytes.
TESSEL_AMX_TARGET inline __m512i codes(const Format& f, const uint8_t* p, int c) {
  constexpr __mmask32 kHighWords = 0xFFFF0000u;
  const __m512i v = _mm512_broadcast_i64x4(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + f.qs + 32 * c)));
  __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(v, kHighWords, v, 4), _mm512_set1_epi8(0x0F));
  if (f.five) {
    const __m512i h =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
    const __m512i hs = _mm512_mask_srli_epi16(_mm512_srli_epi16(h, unsigned(2 * c)), kHighWords, h,
                                              unsigned(2 * c + 1));
    u = _mm512_or_si512(u, _mm512_slli_epi16(_mm512_and_si512(hs, _mm512_set1_epi8(0x01)), 4));
  }
  return u;
}

// Fewer than kTilesFrom activation rows (the decode step), where unpacking a group into the tile
// layout costs more than it saves: per super-block the group's scales as the tiles decode them,
// per activation row and pair of blocks each weight row's vpdpbusd (codes unsigned, activations
// signed) and the lanes summed per block and row, then the tiles' f32 operations on the same
// values. Weight rows past `cols` read the last real row again and are not stored.
TESSEL_AMX_TARGET void few_rows(const Format& f, const Problem& a, int64_t j0, int cols) {
  const Lanes l = lanes(a.row_bytes, cols);
  const uint8_t* base = a.w + j0 * a.row_bytes;
  const uint8_t* rows[kCols];
  for (int c = 0; c < kCols; ++c) rows[c] = base + std::min(c, cols - 1) * a.row_bytes;
  alignas(64) float sc[kSubs * kCols], off[kSubs * kCols];
  const int64_t supers = a.k / kSuper, bytes = f.bytes;
  const uint8_t* end = a.w + a.n * a.row_bytes;
  for (int64_t i = 0; i < a.m; ++i) {
    const float* dx = a.xv.v[0] + i * a.blocks;
    const float* xs = a.xv.v[1] + i * a.blocks;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < supers; ++b) {
      const int64_t at = b * bytes;
      const int64_t ahead = at + prefetch_distance(at, a.row_bytes);
      for (int c = 0; c < kCols; ++c) prefetch(rows[c] + ahead, bytes, end);
      group_scales(l, base + at, sc, off);
      const int8_t* x = a.xq + i * a.k + b * kSuper;
      for (int c2 = 0; c2 < kSubs / 2; ++c2) {
        const __m512i xx = _mm512_loadu_si512(x + 2 * kBlock * c2);
        __m512i lane[kCols];
        for (int c = 0; c < kCols; ++c)
          lane[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes(f, rows[c] + at, c2), xx);
        __m512i sums[2];
        block_sums(lane, sums[0], sums[1]);
        for (int e = 0; e < 2; ++e) {
          const int s = 2 * c2 + e;
          const int64_t g = kSubs * b + s;
          acc = _mm512_fmadd_ps(
              _mm512_cvtepi32_ps(sums[e]),
              _mm512_mul_ps(_mm512_loadu_ps(sc + kCols * s), _mm512_set1_ps(dx[g])), acc);
          acc = _mm512_fnmadd_ps(_mm512_loadu_ps(off + kCols * s), _mm512_set1_ps(xs[g]), acc);
        }
      }
    }
    _mm512_mask_storeu_ps(a.y + i * a.n + j0, l.real, acc);
  }
}

}  // namespace

void q4_k_amx_matmul(bool five, int64_t m, int64_t n, int64_t k, int64_t row_bytes,
                     const int8_t* xq, const float* dx, const float* xs32, const uint8_t* w,
                     float* y, int64_t group_grain) {
  const Format f = format(five);
  TESSEL_CHECK(k % kSuper == 0 && row_bytes == k / kSuper * f.bytes, "q4_k_amx_matmul: k = ", k,
               " and row_bytes = ", row_bytes, " are not ", five ? "Q5_K" : "Q4_K", " rows");
  TESSEL_CHECK((kCols - 1) * row_bytes < (int64_t(1) << 31), "q4_k_amx_matmul: rows of ", row_bytes,
               " bytes are too long for the 32-bit gather offsets");
  const int64_t blocks = k / kBlock;
  const Problem p{m, n, k, blocks, row_bytes, xq, {{dx, xs32}}, w, y};
  if (m >= kTilesFrom) return tile_matmul(KFormat{f}, "q4_k_amx_matmul", p, group_grain);
  each_group(n, group_grain, [&](int64_t j0, int cols) { few_rows(f, p, j0, cols); });
}

}  // namespace tessel::kernels::cpu

namespace tessel::kernels::cpu {

void k_quant_amx_matmul(quant::QuantType type, int64_t m, int64_t n, int64_t k, int64_t row_bytes,
                        const int8_t* xq, const float* dx, const uint8_t* w, float* y,
                        int64_t group_grain) {
  group_grain = std::max<int64_t>(1, group_grain);
  if (type == quant::QuantType::Q6_K)
    return q6_k_amx_matmul(m, n, k, row_bytes, xq, dx, w, y, group_grain);
  TESSEL_CHECK(type == quant::QuantType::Q4_K || type == quant::QuantType::Q5_K,
               "k_quant_amx_matmul: ", quant::quant_type_name(type), " is not a k-quant");
  // dx times each block's code sum, as quant_fused.h's activation_block_sums forms it.
  std::vector<float> xs32(size_t(m * (k / kBlock)));
  for (size_t g = 0; g < xs32.size(); ++g) {
    int32_t sum = 0;
    for (int64_t c = 0; c < kBlock; ++c) sum += xq[int64_t(g) * kBlock + c];
    xs32[g] = dx[g] * float(sum);
  }
  q4_k_amx_matmul(type == quant::QuantType::Q5_K, m, n, k, row_bytes, xq, dx, xs32.data(), w, y,
                  group_grain);
}

}  // namespace tessel::kernels::cpu
