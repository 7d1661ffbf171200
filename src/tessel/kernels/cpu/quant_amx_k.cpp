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
// Layout as quant_amx.cpp: a task owns whole groups of 16 weight rows; per group and chunk of
// activation rows (kChunkBytes of codes, L2) the group's codes are unpacked once into the tile
// layout (the four bytes of a 32-bit gather from 16 rows are four codes of each row for two
// blocks: low nibbles for sub-block 2c, high nibbles for 2c + 1, Q5_K's fifth bits or-ed in) and
// its scales and mins decoded across the 16 rows (three 32-bit gathers of the 12 scale bytes,
// each lane a row) into f32 vectors, and every 16-row tile of the chunk runs over them.
#include "tessel/kernels/cpu/quant_amx_k.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/quant_amx_k_common.h"

namespace tessel::kernels::cpu {

namespace {

using namespace amx_k;

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

struct Args {
  Format f;
  int64_t m, n, k, blocks, row_bytes;
  const int8_t* xq;
  const float* dx;
  const float* xs;
  const int8_t* tail_q;  // the last m % 16 rows, zero-padded to 16 (or null)
  const float* tail_d;
  const float* tail_s;
  const uint8_t* w;
  float* y;
  int64_t chunk_rows;
};

// acc[i] (16 outputs of activation row i) gets block g: fma(f32(S), sc * dx, acc), then minus
// off * xs as one fma.
TESSEL_AMX_TARGET inline void scale_block(const int32_t* sums, const float* sc, const float* off,
                                          const float* dx, const float* xs, int64_t blocks,
                                          int64_t g, __m512 (&acc)[kRows]) {
  const __m512 sw = _mm512_loadu_ps(sc + g * kCols), ow = _mm512_loadu_ps(off + g * kCols);
  for (int i = 0; i < kRows; ++i) {
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums + i * kCols)),
                             _mm512_mul_ps(sw, _mm512_set1_ps(dx[i * blocks + g])), acc[i]);
    acc[i] = _mm512_fnmadd_ps(ow, _mm512_set1_ps(xs[i * blocks + g]), acc[i]);
  }
}

// One tile: 16 activation rows (codes k apart, scales and sums `blocks` apart) times a packed
// group; the first `rows` x `cols` outputs stored at y (rows n apart). Two blocks in flight.
TESSEL_AMX_TARGET void tile(const Args& a, const int8_t* x, const float* dx, const float* xs,
                            const int8_t* packed, const float* sc, const float* off, float* y,
                            int64_t rows, int cols) {
  alignas(64) int32_t s0[kRows * kCols], s1[kRows * kCols];
  __m512 acc[kRows];
  for (auto& v : acc) v = _mm512_setzero_ps();
  const int64_t k = a.k, blocks = a.blocks;
  for (int64_t g = 0; g < blocks; g += 2) {  // blocks is a multiple of 8
    _tile_loadd(0, x + kBlock * g, k);
    _tile_loadd(1, packed + g * kPacked, 64);
    _tile_zero(2);
    _tile_dpbssd(2, 0, 1);
    _tile_loadd(3, x + kBlock * (g + 1), k);
    _tile_loadd(4, packed + (g + 1) * kPacked, 64);
    _tile_zero(5);
    _tile_dpbssd(5, 3, 4);
    _tile_stored(2, s0, 64);
    _tile_stored(5, s1, 64);
    scale_block(s0, sc, off, dx, xs, blocks, g, acc);
    scale_block(s1, sc, off, dx, xs, blocks, g + 1, acc);
  }
  const __mmask16 real = __mmask16((1u << cols) - 1);
  for (int64_t i = 0; i < rows; ++i) _mm512_mask_storeu_ps(y + i * a.n, real, acc[i]);
}

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
TESSEL_AMX_TARGET void few_rows(const Args& a, int64_t j0, int cols) {
  const Lanes l = lanes(a.row_bytes, cols);
  const uint8_t* base = a.w + j0 * a.row_bytes;
  const uint8_t* rows[kCols];
  for (int c = 0; c < kCols; ++c) rows[c] = base + std::min(c, cols - 1) * a.row_bytes;
  alignas(64) float sc[kSubs * kCols], off[kSubs * kCols];
  const int64_t supers = a.k / kSuper, bytes = a.f.bytes;
  const uint8_t* end = a.w + a.n * a.row_bytes;
  for (int64_t i = 0; i < a.m; ++i) {
    const float* dx = a.dx + i * a.blocks;
    const float* xs = a.xs + i * a.blocks;
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
          lane[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes(a.f, rows[c] + at, c2), xx);
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

// Groups [lo, hi) of 16 weight rows against every activation row, chunk by chunk.
TESSEL_AMX_TARGET void groups(const Args& a, int64_t lo, int64_t hi) {
  static const TileConfig config = tile_config(kBlock);
  _tile_loadconfig(&config);
  const int64_t supers = a.k / kSuper;
  std::vector<int8_t> packed(size_t(a.blocks * kPacked));
  std::vector<float> sc(size_t(a.blocks * kCols)), off(size_t(a.blocks * kCols));
  for (int64_t i0 = 0; i0 < a.m; i0 += a.chunk_rows) {
    const int64_t i1 = std::min(a.m, i0 + a.chunk_rows);
    for (int64_t gj = lo; gj < hi; ++gj) {
      const int64_t j0 = gj * kCols;
      const int cols = int(std::min<int64_t>(kCols, a.n - j0));
      const Lanes l = lanes(a.row_bytes, cols);
      const uint8_t* base = a.w + j0 * a.row_bytes;
      for (int64_t b = 0; b < supers; ++b) {
        pack_super(l, a.f, base + b * a.f.bytes, packed.data() + kSubs * b * kPacked);
        group_scales(l, base + b * a.f.bytes, sc.data() + kSubs * b * kCols,
                     off.data() + kSubs * b * kCols);
      }
      for (int64_t i = i0; i < i1; i += kRows) {
        const int64_t rows = std::min<int64_t>(kRows, i1 - i);
        const bool whole = rows == kRows;
        tile(a, whole ? a.xq + i * a.k : a.tail_q, whole ? a.dx + i * a.blocks : a.tail_d,
             whole ? a.xs + i * a.blocks : a.tail_s, packed.data(), sc.data(), off.data(),
             a.y + i * a.n + j0, rows, cols);
      }
    }
  }
  _tile_release();
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
  const int64_t group_count = (n + kCols - 1) / kCols;
  if (m < kTilesFrom) {
    const Args a{f, m, n, k, blocks, row_bytes, xq, dx, xs32, nullptr, nullptr, nullptr, w, y, m};
    parallel_for(0, group_count, group_grain, [&](int64_t lo, int64_t hi) {
      for (int64_t gj = lo; gj < hi; ++gj)
        few_rows(a, gj * kCols, int(std::min<int64_t>(kCols, n - gj * kCols)));
    });
    return;
  }
  // Chunks of whole tiles, so only the last chunk can end in a partial tile.
  const int64_t chunk_rows = std::max<int64_t>(kRows, kChunkBytes / k / kRows * kRows);
  const int64_t tail = m % kRows;
  std::vector<int8_t> tail_q;
  std::vector<float> tail_d, tail_s;
  if (tail > 0) {
    tail_q.assign(size_t(kRows * k), 0);
    tail_d.assign(size_t(kRows * blocks), 0.0f);
    tail_s.assign(size_t(kRows * blocks), 0.0f);
    std::memcpy(tail_q.data(), xq + (m - tail) * k, size_t(tail * k));
    std::memcpy(tail_d.data(), dx + (m - tail) * blocks, size_t(tail * blocks) * sizeof(float));
    std::memcpy(tail_s.data(), xs32 + (m - tail) * blocks, size_t(tail * blocks) * sizeof(float));
  }
  const Args a{f,
               m,
               n,
               k,
               blocks,
               row_bytes,
               xq,
               dx,
               xs32,
               tail_q.data(),
               tail_d.data(),
               tail_s.data(),
               w,
               y,
               chunk_rows};
  parallel_for(0, group_count, group_grain, [&](int64_t lo, int64_t hi) { groups(a, lo, hi); });
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
