// SPDX-License-Identifier: Apache-2.0
// The k-quant prompt tiles of quant_k_tiles.h on 512-bit vectors, for the avx512 set: each
// output keeps one zmm accumulator whose low half takes the even blocks and high half the odd
// ones, as quant_fused_rows512.h's rows do (Q4_K / Q5_K: sub-blocks 2c | 2c+1 of chunk c; Q6_K:
// quarters 0 | 1, then 2 | 3 of each half), so each unpacking step, dot product, conversion,
// scale product and FMA covers 64 weights. Each half receives the 256-bit rows' operations for
// its blocks (the same exact int32 lane sums, times the same f32 products sc * dx, one FMA per
// block in block order) and the halves are added and reduced as those rows add their two
// accumulators, so the outputs are the row kernels' bits. Constants are uniform or put together
// under masks (the GCC 12.2 defect in docs/KERNELS.md), using quant_fused_rows512.h's helpers.
// Kernel-private: include inside TESSEL_ISA_BEGIN after quant_k_tiles.h and
// quant_fused_rows512.h.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

#if TESSEL_KERNEL_ISA_LEVEL >= 2

// Activation rows per 512-bit tile: 4 x 4 outputs is 16 accumulators, with the weight rows'
// codes and scale vectors within the 32 registers.
inline constexpr int kKTile512M = 4;

// Q4_K / Q5_K chunk c of the super-block at p: sub-block 2c in the low half, 2c+1 in the high.
template <bool kFive>
inline __m512i q4_k_codes512(const uint8_t* p, int c) {
  const __m512i v = load256_twice(p + (kFive ? 48 : 16) + 32 * c);
  const __m512i u = chunk_nibbles<false>(v, _mm512_setzero_si512());
  if constexpr (kFive) return fifth_bits(u, load256_twice(p + 16), fifth_bit_mask(c));
  return u;
}

// Q6_K quarters 2r | 2r+1 of half h of the super-block at p (q6_k_rows512's u01, u23).
inline __m512i q6_k_codes512(const uint8_t* p, int h, int r) {
  const __m512i mask = _mm512_set1_epi8(0xF), top = _mm512_set1_epi8(0x30);
  const __m512i ab = load512(p + 64 * h), hv = load256_twice(p + 128 + 32 * h);
  if (r == 0) {
    const __m512i h01 = _mm512_mask_slli_epi16(_mm512_slli_epi16(hv, 2), kLowWords, hv, 4);
    return _mm512_or_si512(_mm512_and_si512(ab, mask), _mm512_and_si512(h01, top));
  }
  const __m512i h23 = _mm512_mask_srli_epi16(hv, kHighWords, hv, 2);
  return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ab, 4), mask),
                         _mm512_and_si512(h23, top));
}

// kM activation rows x kN weight rows, two 32-weight blocks per step: Q4_K / Q5_K blocks
// g = 8b + 2s, g + 1 (s = chunk); Q6_K blocks g = 8b + 4h + 2r, g + 1 (quarters 2r, 2r + 1).
template <class Dot, quant::QuantType kType, int kM, int kN>
inline void k_tile512(const KTile& t) {
  constexpr bool kSix = kType == quant::QuantType::Q6_K;
  const __m512i idx = quad_index();
  (void)idx;
  __m512 acc[kM][kN];
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < kN; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < t.blocks / 8; ++b)
    for (int s = 0; s < 4; ++s) {
      const int64_t g = 8 * b + 2 * s;
      __m512i u[kN];
      __m512 sw[kN];
      for (int j = 0; j < kN; ++j) {
        const uint8_t* p = t.w + j * t.st.row + b * t.st.block;
        if constexpr (kSix) {
          u[j] = q6_k_codes512(p, s / 2, s % 2);
          sw[j] = quad_scales(idx, t.sc + j * t.sc_stride + 2 * g);
        } else {
          u[j] = q4_k_codes512<kType == quant::QuantType::Q5_K>(p, s);
          sw[j] = two_scales(t.sc + j * t.sc_stride + g);
        }
      }
      for (int i = 0; i < kM; ++i) {
        const __m512i xx = load512(t.x + i * t.k + 32 * g);
        const __m512i init =
            kSix ? load512(t.zx + i * 8 * t.blocks + 8 * g) : _mm512_setzero_si512();
        const __m512 d = two_scales(t.dx + i * t.blocks + g);
        for (int j = 0; j < kN; ++j)
          acc[i][j] = _mm512_fmadd_ps(to_float(Dot::dot(init, u[j], xx)), _mm512_mul_ps(sw[j], d),
                                      acc[i][j]);
      }
    }
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < kN; ++j) t.y[i * t.ldy + j] = hsum_halves(acc[i][j]);
}

// The driver's tiles (quant_k_tiles.h): 4 x 4 tiles, single activation rows and single weight
// rows in narrower ones (any split gives the same bits).
template <class Dot, quant::QuantType kType>
struct KTiles512 {
  static constexpr int64_t kRows = kKTile512M;
  static constexpr auto kTile = []<int kM, int kN>(const KTile& t) {
    k_tile512<Dot, kType, kM, kN>(t);
  };
  static void group(int64_t rows, const KTile& t) {
    k_tile_rows<kKTile512M, kKTileN>(rows, t, kTile);
  }
  static void column(int64_t rows, const KTile& t) { k_tile_rows<kKTile512M, 1>(rows, t, kTile); }
};

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
