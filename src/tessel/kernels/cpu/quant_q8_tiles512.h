// SPDX-License-Identifier: Apache-2.0
// The Q8_0 prompt tiles of quant_q8_tiles.h on 512-bit vectors, for the avx512 set on CPUs with
// AVX-512 VNNI: each vector holds the 8 lanes of two outputs, (activation row i, weight row j)
// in the low half and (i, j + 1) in the high half, so each vpdpbusd, conversion, scale product
// and FMA serves two outputs. Each half receives exactly the 256-bit tile's operations for its
// output (the same exact int32 lane sums, the same f16(d_w) * dx products, one FMA per block in
// block order) and is reduced by the same horizontal sum, so the outputs are the row kernel's
// bits (batch invariance across the m threshold and the tile shapes). AVX-512 has no vpsignb, so
// without VNNI the avx512 set keeps the 256-bit tiles. Constants are uniform (the GCC 12.2
// defect in docs/KERNELS.md mangles those with unequal 64-bit elements), and the halves are
// joined with zero-masking forms, as quant_fused_rows512.h does. Kernel-private: include inside
// TESSEL_ISA_BEGIN after quant_q8_tiles.h and quant_fused_rows512.h.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

#if TESSEL_KERNEL_ISA_LEVEL >= 2

// Activation rows per 512-bit tile: 8 rows x 2 pairs of weight rows is 16 accumulators, with the
// pairs' codes, offsets and scales within the 32 registers.
inline constexpr int kQ8Tile512M = 8;

// y[i * ldy + j] for kM activation rows and the kQ8TileN (= 2 * kPairs) weight rows at w (block
// g of row j at w + j * st.row + g * st.block).
template <int kM>
inline void q8_0_tile512(const uint8_t* w, quant::RowStrides st, const int8_t* x, int64_t k,
                         const float* dx, int64_t blocks, float* y, int64_t ldy) {
  constexpr int kPairs = int(kQ8TileN) / 2;
  const __m512i bias = _mm512_set1_epi8(char(0x80));
  __m512 acc[kM][kPairs];
  for (int i = 0; i < kM; ++i)
    for (int p = 0; p < kPairs; ++p) acc[i][p] = _mm512_setzero_ps();
  for (int64_t g = 0; g < blocks; ++g) {
    __m512i codes[kPairs], minus_offset[kPairs];
    __m512 sw[kPairs];
    for (int p = 0; p < kPairs; ++p) {
      const uint8_t* lo = w + 2 * p * st.row + g * st.block;
      const uint8_t* hi = lo + st.row;
      codes[p] =
          _mm512_mask_broadcast_i64x4(load256_twice(lo + 2), __mmask8(0xF0), load256(hi + 2));
      const __m512i offset = Dot512Vnni::dot(_mm512_setzero_si512(), bias, codes[p]);
      minus_offset[p] = _mm512_sub_epi32(_mm512_setzero_si512(), offset);
      sw[p] = _mm512_mask_broadcastss_ps(_mm512_set1_ps(load_half(lo)), __mmask16(0xFF00),
                                         _mm_set_ss(load_half(hi)));
    }
    for (int i = 0; i < kM; ++i) {
      const __m512i xu = _mm512_xor_si512(load256_twice(x + i * k + 32 * g), bias);
      const __m512 sx = _mm512_set1_ps(dx[i * blocks + g]);
      for (int p = 0; p < kPairs; ++p)
        acc[i][p] = _mm512_fmadd_ps(to_float(Dot512Vnni::dot(minus_offset[p], xu, codes[p])),
                                    _mm512_mul_ps(sw[p], sx), acc[i][p]);
    }
  }
  for (int i = 0; i < kM; ++i)
    for (int p = 0; p < kPairs; ++p) {
      y[i * ldy + 2 * p] = hsum(_mm512_maskz_extractf32x8_ps(__mmask8(0xFF), acc[i][p], 0));
      y[i * ldy + 2 * p + 1] = hsum(_mm512_maskz_extractf32x8_ps(__mmask8(0xFF), acc[i][p], 1));
    }
}

// The driver's tiles (quant_q8_tiles.h): groups in 512-bit tiles of 8, 4, 2 and 1 rows (any
// split gives the same bits), single weight rows in the 256-bit VNNI tile.
struct Q8Tiles512 {
  static constexpr int64_t kRows = kQ8Tile512M;
  static void group(int64_t rows, const uint8_t* w, quant::RowStrides st, const int8_t* x,
                    int64_t k, const float* dx, int64_t blocks, float* y, int64_t ldy) {
    for (int64_t i = 0; i < rows;) {
      const int8_t* xi = x + i * k;
      const float* dxi = dx + i * blocks;
      float* yi = y + i * ldy;
      const int64_t left = rows - i;
      if (left >= 8) {
        q8_0_tile512<8>(w, st, xi, k, dxi, blocks, yi, ldy);
        i += 8;
      } else if (left >= 4) {
        q8_0_tile512<4>(w, st, xi, k, dxi, blocks, yi, ldy);
        i += 4;
      } else if (left >= 2) {
        q8_0_tile512<2>(w, st, xi, k, dxi, blocks, yi, ldy);
        i += 2;
      } else {
        q8_0_tile512<1>(w, st, xi, k, dxi, blocks, yi, ldy);
        i += 1;
      }
    }
  }
  static void column(int64_t rows, const uint8_t* w, quant::RowStrides st, const int8_t* x,
                     int64_t k, const float* dx, int64_t blocks, float* y, int64_t ldy) {
    for (int64_t i = 0; i < rows; i += kQ8TileM)
      q8_0_tile_rows<Q8PairOffset<DotVnni>, 1>(std::min<int64_t>(kQ8TileM, rows - i), w, st,
                                               x + i * k, k, dx + i * blocks, blocks, y + i * ldy,
                                               ldy);
  }
};

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
