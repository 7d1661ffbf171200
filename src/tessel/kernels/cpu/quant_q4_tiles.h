// SPDX-License-Identifier: Apache-2.0
// Q4_0 weights times activation rows in register tiles, in the avx512 set where the CPU has no
// AMX-INT8 (or it is switched off): the register blocking of quant_q8_tiles.h (Goto and van de
// Geijn, "Anatomy of High-Performance Matrix Multiplication") for Q4_0's blocks, for every m. A
// tile of kM activation rows x kN weight rows unpacks each weight block's nibbles and reads its f16
// scale once, loads each activation block once, and keeps its kM x kN outputs' accumulators in
// registers; at m = 1 (the decode step) it is a pass over four weight rows sharing each activation
// block (the avx2 set's row kernel, q4_0_rows, unpacks and scales per activation row and runs each
// row's FMA chains apart; with its 16 vector registers these tiles measured slower than it).
//
// Every output's operations, in order: per block the exact int32 lane sums of u . x (u the codes
// 0..15), converted and added by one FMA with f16(d) * dx into the accumulator of the block's
// parity (even, odd); the zero point 8 d through the activations' block sums, as two chains
// (even, odd) of fused multiply-adds d * xs32, here for the kN weight rows side by side in the
// lanes of one vector (each lane one row's chain); then q4_0_finish. Nothing depends on the tile
// shape or on the other rows, so a row's result is the same bits alone and in any prompt (batch
// invariance), on every dot product (the lane sums are exact). Kernel-private: include inside
// TESSEL_ISA_BEGIN after quant_fused_rows.h and quant_q8_tiles.h.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

#if TESSEL_KERNEL_ISA_LEVEL >= 2

// Weight rows per group (a task owns whole groups) and per tile, and activation rows per tile:
// 2 x 2 x 4 accumulators, the 4 weight rows' codes and the offset chains in 32 vector registers.
inline constexpr int kQ4TileN = 4, kQ4TileCols = 4;
inline constexpr int kQ4TileM = 2;

// Where block g of a tile's weight row j lies, from the tile's first row at w: Q4_0 rows
// row_bytes apart (each block its scale, then its codes), or one regrouped group of four
// (quant/q4_0_groups.h: per block the four scales, then the four rows' codes). The arithmetic
// is the same for both, so are the bits.
struct Q4PlainRows {
  int64_t row_bytes;
  const uint8_t* scale(const uint8_t* w, int64_t j, int64_t g) const {
    return w + j * row_bytes + 18 * g;
  }
  const uint8_t* codes(const uint8_t* w, int64_t j, int64_t g) const { return scale(w, j, g) + 2; }
};

struct Q4GroupRows {
  const uint8_t* scale(const uint8_t* w, int64_t j, int64_t g) const {
    return w + quant::kQ4GroupBlockBytes * g + 2 * j;
  }
  const uint8_t* codes(const uint8_t* w, int64_t j, int64_t g) const {
    return w + quant::kQ4GroupBlockBytes * g + quant::kQ4GroupCodesAt + 16 * j;
  }
};

// y[i * ldy + j] for kM activation rows (codes k apart; scales and block sums `blocks` apart) and
// kN weight rows (laid out as `rows` says), over all blocks.
template <class Dot, int kM, int kN, class Rows>
inline void q4_0_tile(const uint8_t* w, Rows rows, const int8_t* x, int64_t k, const float* dx,
                      const float* xs32, int64_t blocks, float* y, int64_t ldy) {
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc[2][kM][kN];
  __m128 off[2][kM];  // lane j: weight row j's zero-point chain
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < kM; ++i) {
      off[c][i] = _mm_setzero_ps();
      for (int j = 0; j < kN; ++j) acc[c][i][j] = _mm256_setzero_ps();
    }
  auto block = [&](int64_t g, int c) {
    __m256i u[kN];
    float d[4] = {0, 0, 0, 0};
    for (int j = 0; j < kN; ++j) {
      u[j] = q4_0_nibbles(rows.codes(w, j, g));
      d[j] = load_half(rows.scale(w, j, g));
    }
    const __m128 dv = _mm_loadu_ps(d);
    for (int i = 0; i < kM; ++i) {
      const __m256i xv = load256(x + i * k + 32 * g);
      const float sx = dx[i * blocks + g];
      for (int j = 0; j < kN; ++j)
        acc[c][i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::dot(zero, u[j], xv)),
                                       _mm256_set1_ps(d[j] * sx), acc[c][i][j]);
      off[c][i] = _mm_fmadd_ps(dv, _mm_set1_ps(xs32[i * blocks + g]), off[c][i]);
    }
  };
  int64_t g = 0;
  for (; g + 2 <= blocks; g += 2) {
    block(g, 0);
    block(g + 1, 1);
  }
  if (g < blocks) block(g, 0);
  for (int i = 0; i < kM; ++i) {
    alignas(16) float o0[4], o1[4];
    _mm_store_ps(o0, off[0][i]);
    _mm_store_ps(o1, off[1][i]);
    for (int j = 0; j < kN; ++j)
      y[i * ldy + j] = q4_0_finish(_mm256_add_ps(acc[0][i][j], acc[1][i][j]), o0[j] + o1[j]);
  }
}

// The tile for `rows` (1..kQ4TileM) activation rows and kN weight rows.
template <class Dot, int kN, class Rows>
inline void q4_0_tile_rows(int64_t rows, const uint8_t* w, Rows layout, const int8_t* x, int64_t k,
                           const float* dx, const float* xs32, int64_t blocks, float* y,
                           int64_t ldy) {
  if (rows >= 2) return q4_0_tile<Dot, 2, kN>(w, layout, x, k, dx, xs32, blocks, y, ldy);
  q4_0_tile<Dot, 1, kN>(w, layout, x, k, dx, xs32, blocks, y, ldy);
}

// y[m, n] = x[m, k] W[n, k]^T for Q4_0 rows of W (row_bytes apart; kGrouped: regrouped four rows
// at a time, quant/q4_0_groups.h), x already rounded to int8 blocks (xq, dx) with its block sums
// xs32 (activation_block_sums). Whole groups of kQ4TileN weight rows per task, so no output
// depends on the split.
template <class Dot, bool kGrouped = false>
void q4_0_tiles(int64_t m, int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq,
                const float* dx, const float* xs32, const uint8_t* w, float* y,
                int64_t group_grain) {
  static_assert(!kGrouped || (kQ4TileN == quant::kQ4GroupRows && kQ4TileCols == kQ4TileN),
                "a regrouped group is one tile's weight rows");
  constexpr int64_t kN = kQ4TileN;
  const int64_t blocks = k / kActBlock;
  int8_tile_loop(
      m, n, k, kQ4TileM, kN, group_grain, [&](int64_t i, int64_t rows, int64_t j0, int64_t cols) {
        const int8_t* xi = xq + i * k;
        const float* dxi = dx + i * blocks;
        const float* xsi = xs32 + i * blocks;
        float* yi = y + i * n + j0;
        if (cols == kN && kGrouped) {
          q4_0_tile_rows<Dot, kQ4TileCols>(rows, w + j0 * row_bytes, Q4GroupRows{}, xi, k, dxi, xsi,
                                           blocks, yi, n);
        } else if (cols == kN) {
          for (int j = 0; j < kN; j += kQ4TileCols)
            q4_0_tile_rows<Dot, kQ4TileCols>(rows, w + (j0 + j) * row_bytes, Q4PlainRows{row_bytes},
                                             xi, k, dxi, xsi, blocks, yi + j, n);
        } else {  // the last rows, plain in either layout
          for (int64_t c = 0; c < cols; ++c)
            q4_0_tile_rows<Dot, 1>(rows, w + (j0 + c) * row_bytes, Q4PlainRows{row_bytes}, xi, k,
                                   dxi, xsi, blocks, yi + c, n);
        }
      });
}

// The 512-bit Q4_0 kernels, where the CPU has AVX-512 VNNI: four weight rows per register, each
// row's 16 code bytes of a block in one 128-bit lane. The low nibbles (elements 0-15) and the
// high nibbles (16-31) go through vpdpbusd separately, against the activation block's first and
// second 16 bytes broadcast to every lane, so each int32 lane is one of the exact sums the 1 x 4
// tile's 256-bit lanes hold (its lanes 0-3 are the low nibbles' 4-byte groups, 4-7 the high
// nibbles'). Each lane then takes the tile's f32 steps: the conversion, one FMA per block with
// the same f16(d) * dx product into the accumulator of the block's parity, and at the end the
// row's eight lanes put back in the tile's order and reduced by q4_0_finish with the zero-point
// chains the tile keeps: the outputs equal the tile's bit for bit (quant_amx_q4_0_test.cpp checks
// a row alone against the same row in a prompt, quant_q4_0_groups_test.cpp every kernel against
// the rows in place).
//
// One activation row's accumulators against four weight rows: per block parity (even, odd) the
// low and the high nibbles' lane sums (row j in lanes 4j..4j+3) and the zero-point chains (row j
// in lane j). The parity is a constant at every use: with it computed per block (g & 1) GCC kept
// the accumulators on the stack, and the kernels ran at half their rate in cache (BENCHMARKS.md,
// "Q4_0 regrouped for the decode rows").
struct Q4Quad512 {
  __m512 lo[2], hi[2];
  __m128 off[2];
};

inline void q4_quad_zero(Q4Quad512& a) {
  for (int c = 0; c < 2; ++c) {
    a.lo[c] = a.hi[c] = _mm512_setzero_ps();
    a.off[c] = _mm_setzero_ps();
  }
}

// The constants of q4_quad_block, made once per kernel call (plain functions, not member
// initializers: those are compiled outside the kernel set's target options).
struct Q4QuadConsts {
  __m512i mask, zero, idx;
};

inline Q4QuadConsts q4_quad_consts() {
  return {_mm512_set1_epi8(0xF), _mm512_setzero_si512(), quad_index()};
}

// One block of four weight rows (b: row j's 16 code bytes in lane j; dv: their f16 scales
// widened) against an activation block (its 32 codes at xb, its scale dx and code sum xs) into
// parity c of `a`.
template <class Dot512>
inline void q4_quad_block(Q4Quad512& a, int c, const Q4QuadConsts& k, __m512i b, __m128 dv,
                          const int8_t* xb, float dx, float xs) {
  const __m512i u_lo = _mm512_and_si512(b, k.mask);
  const __m512i u_hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), k.mask);
  const __m512i x_lo = _mm512_maskz_broadcast_i32x4(
      __mmask16(0xFFFF), _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb)));
  const __m512i x_hi = _mm512_maskz_broadcast_i32x4(
      __mmask16(0xFFFF), _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 16)));
  // Row j's lanes 4j..4j+3 take d[j] * dx, the tile's product.
  const __m512 scale = quad_scales(k.idx, _mm_mul_ps(dv, _mm_set1_ps(dx)));
  a.lo[c] = _mm512_fmadd_ps(to_float(Dot512::dot(k.zero, u_lo, x_lo)), scale, a.lo[c]);
  a.hi[c] = _mm512_fmadd_ps(to_float(Dot512::dot(k.zero, u_hi, x_hi)), scale, a.hi[c]);
  a.off[c] = _mm_fmadd_ps(dv, _mm_set1_ps(xs), a.off[c]);
}

// The four outputs y[0], y[ldy], ... of one activation row.
inline void q4_quad_finish(const Q4Quad512& a, float* y, int64_t ldy) {
  alignas(64) float l[16], h[16];
  _mm512_store_ps(l, _mm512_add_ps(a.lo[0], a.lo[1]));
  _mm512_store_ps(h, _mm512_add_ps(a.hi[0], a.hi[1]));
  alignas(16) float o0[4], o1[4];
  _mm_store_ps(o0, a.off[0]);
  _mm_store_ps(o1, a.off[1]);
  for (int j = 0; j < 4; ++j) {
    // The tile's acc[0] + acc[1] for row j: lanes 0-3 low nibbles, 4-7 high nibbles.
    const __m256 acc = _mm256_set_m128(_mm_load_ps(h + 4 * j), _mm_load_ps(l + 4 * j));
    y[j * ldy] = q4_0_finish(acc, o0[j] + o1[j]);
  }
}

// Blocks two at a time, block(g, parity) with the parity a constant.
template <class Block>
inline void q4_quad_blocks(int64_t blocks, Block&& block) {
  int64_t g = 0;
  for (; g + 2 <= blocks; g += 2) {
    block(g, 0);
    block(g + 1, 1);
  }
  if (g < blocks) block(g, 0);
}

// The decode step (m = 1) on Q4_0's rows in place: per block and four rows, four 128-bit loads and
// three inserts gather the codes and four scalar conversions the scales, where the 1 x 4 tile
// spends per row a shift, a mask, an insert, a vpdpbusd, a conversion, a broadcast and an FMA; the
// rows kDecodeAheadRows on are prefetched, or a capped distance along the row (decode_ahead_bytes;
// the tiles' hardware-only prefetch left a decode from memory at half Q8_0's bytes per second).
template <class Dot512>
inline void q4_0_rows4_512(const uint8_t* w, int64_t row_bytes, const int8_t* x, const float* dx,
                           const float* xs32, int64_t blocks, float* y) {
  const Q4QuadConsts k = q4_quad_consts();
  Q4Quad512 a;
  q4_quad_zero(a);
  const int64_t ahead = decode_ahead_bytes(kDecodeAheadRows, row_bytes);
  q4_quad_blocks(blocks, [&](int64_t g, int c) {
    const uint8_t* p = w + 18 * g;
    for (int r = 0; r < 4; ++r) decode_prefetch<kQ4DecodeTo>(p + r * row_bytes + ahead);
    // Row r's 16 code bytes (after its 2-byte scale).
    auto codes = [&](int r) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * row_bytes + 2));
    };
    __m512i b = _mm512_castsi128_si512(codes(0));
    b = _mm512_inserti32x4(b, codes(1), 1);
    b = _mm512_inserti32x4(b, codes(2), 2);
    b = _mm512_inserti32x4(b, codes(3), 3);
    const __m128 dv = _mm_setr_ps(load_half(p), load_half(p + row_bytes),
                                  load_half(p + 2 * row_bytes), load_half(p + 3 * row_bytes));
    q4_quad_block<Dot512>(a, c, k, b, dv, x + 32 * g, dx[g], xs32[g]);
  });
  q4_quad_finish(a, y, 1);
}

// Bytes ahead of the block in use that the regrouped decode rows prefetch: the matrix is one
// sequential stream there, and a prefetch 2 KiB ahead (about the rows eight on of the plain
// layout's kDecodeAheadRows at GPT-2's widths) left it waiting on memory as often as the plain
// rows do (a stand-alone measurement on Zen 5: 14-15 GB/s at 2 KiB, 17-24 at 8 KiB).
inline constexpr int64_t kQ4GroupAheadBytes = 8192;

// One regrouped group of four weight rows (quant/q4_0_groups.h) against kM activation rows
// (codes k apart, scales and sums `blocks` apart; outputs y[i * ldy + j]): per block one 512-bit
// load gives the four rows' codes in their lanes (where the rows in place take four loads and
// three inserts) and one 8-byte load and conversion the four scales, unpacked once for the kM
// rows. kPrefetch (the decode step): prefetch kQ4GroupAheadBytes ahead; a prompt's tiles re-read
// the group from cache for each further kM rows and leave it to the hardware.
inline constexpr int kQ4GroupTileM = 4;

template <class Dot512, int kM, bool kPrefetch>
inline void q4_0_group_tile512(const uint8_t* w, const int8_t* x, int64_t k, const float* dx,
                               const float* xs32, int64_t blocks, float* y, int64_t ldy) {
  const Q4QuadConsts consts = q4_quad_consts();
  Q4Quad512 a[kM];
  for (Q4Quad512& ai : a) q4_quad_zero(ai);
  q4_quad_blocks(blocks, [&](int64_t g, int c) {
    const uint8_t* p = w + quant::kQ4GroupBlockBytes * g;
    if constexpr (kPrefetch) decode_prefetch<kQ4DecodeTo>(p + kQ4GroupAheadBytes);
    const __m512i b = load512(p + quant::kQ4GroupCodesAt);
    // The four f16 scales, exactly as load_half converts each.
    const __m128 dv = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    for (int i = 0; i < kM; ++i)
      q4_quad_block<Dot512>(a[i], c, consts, b, dv, x + i * k + 32 * g, dx[i * blocks + g],
                            xs32[i * blocks + g]);
  });
  for (int i = 0; i < kM; ++i) q4_quad_finish(a[i], y + i * ldy, 1);
}

// y[m, n] for regrouped weights (quant/q4_0_groups.h), m >= 1: whole groups per task, the
// activations in L2-sized chunks as q4_0_tiles; the last rows (n mod 4, plain) by the 1 x 1
// tile of the 256-bit kernel (the same bits).
template <class Dot, class Dot512>
void q4_0_group_tiles512(int64_t m, int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq,
                         const float* dx, const float* xs32, const uint8_t* w, float* y,
                         int64_t group_grain) {
  const int64_t blocks = k / kActBlock;
  int8_tile_loop(
      m, n, k, kQ4GroupTileM, 4, group_grain,
      [&](int64_t i, int64_t rows, int64_t j0, int64_t cols) {
        const int8_t* xi = xq + i * k;
        const float* dxi = dx + i * blocks;
        const float* xsi = xs32 + i * blocks;
        float* yi = y + i * n + j0;
        const uint8_t* wg = w + j0 * row_bytes;
        if (cols == 4) {
          switch (rows) {
            case 4:
              return q4_0_group_tile512<Dot512, 4, false>(wg, xi, k, dxi, xsi, blocks, yi, n);
            case 3:
              return q4_0_group_tile512<Dot512, 3, false>(wg, xi, k, dxi, xsi, blocks, yi, n);
            case 2:
              return q4_0_group_tile512<Dot512, 2, false>(wg, xi, k, dxi, xsi, blocks, yi, n);
            default:
              return q4_0_group_tile512<Dot512, 1, false>(wg, xi, k, dxi, xsi, blocks, yi, n);
          }
        }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            q4_0_tile_rows<Dot, 1>(1, w + (j0 + c) * row_bytes, Q4PlainRows{row_bytes}, xi + r * k,
                                   k, dxi + r * blocks, xsi + r * blocks, blocks, yi + r * n + c,
                                   n);
      });
}

// One activation row times every weight row: groups of four rows on 512-bit vectors (kGrouped:
// regrouped ones), a last group of fewer rows by the 1 x 1 tile (the same bits); whole groups
// per task.
template <class Dot, class Dot512, bool kGrouped = false>
void q4_0_decode_512(int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq, const float* dx,
                     const float* xs32, const uint8_t* w, float* y, int64_t group_grain) {
  const int64_t blocks = k / kActBlock;
  const int64_t groups = (n + 3) / 4;
  parallel_for(0, groups, group_grain, [&](int64_t lo, int64_t hi) {
    for (int64_t gj = lo; gj < hi; ++gj) {
      const int64_t j0 = gj * 4, cols = std::min<int64_t>(4, n - j0);
      if (cols == 4 && kGrouped) {
        q4_0_group_tile512<Dot512, 1, true>(w + j0 * row_bytes, xq, 0, dx, xs32, blocks, y + j0, 0);
      } else if (cols == 4) {
        q4_0_rows4_512<Dot512>(w + j0 * row_bytes, row_bytes, xq, dx, xs32, blocks, y + j0);
      } else {
        for (int64_t c = 0; c < cols; ++c)
          q4_0_tile_rows<Dot, 1>(1, w + (j0 + c) * row_bytes, Q4PlainRows{row_bytes}, xq, k, dx,
                                 xs32, blocks, y + j0 + c, n);
      }
    }
  });
}

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
