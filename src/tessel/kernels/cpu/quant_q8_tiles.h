// SPDX-License-Identifier: Apache-2.0
// Q8_0 weights times a prompt's activation rows as a register-blocked GEMM (the micro-kernel
// structure of Goto and van de Geijn, "Anatomy of High-Performance Matrix Multiplication",
// on int8 blocks). The row kernel of quant_dot.h (q8_0_rows) multiplies a group of weight rows
// with one activation row at a time, so every 32-code block of W is loaded, its scale widened
// and its codes' magnitudes taken again for each activation row. Here a tile of kQ8TileM
// activation rows x kQ8TileCols weight rows keeps its kQ8TileM * kQ8TileCols accumulators in
// registers: each weight block is loaded and prepared once per tile and used kQ8TileM times,
// each activation block once per tile and used kQ8TileCols times. Cache blocking: a weight group
// (kQ8TileN rows, a few KiB) stays in L1 while the tiles of an activation chunk (kQ8ChunkBytes
// of codes, in L2) pass over it.
//
// Every output gets exactly the operations of q8_0_rows, in the same order: per block the same
// exact int32 lane sums, converted, multiplied by f16(d_w) * dx and added with one FMA to an
// 8-lane accumulator, then the same horizontal sum. So a row's result is the same bits whether
// the row kernel (m < kQ8TilesFrom) or a tile of any shape computes it (batch invariance).
// The lane sums are exact integers however they are formed:
//   Q8PairSign (vpmaddubsw): |w| x sign(w) x, as quant_dot.h does (no pair sum reaches 2^15);
//   Q8PairOffset (vpdpbusd, AVX-VNNI or AVX-512 VNNI): the activation as the unsigned x + 128
//     (x ^ 0x80) times the signed codes, starting from -128 * (the lane's sum of codes), worked
//     out once per weight block and tile: one instruction per pair instead of three.
// Kernel-private: include inside TESSEL_ISA_BEGIN, after quant_dot.h and quant_fused_rows.h.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

#if TESSEL_KERNEL_ISA_LEVEL >= 1

// From this many activation rows Q8_0 runs in tiles; below it the row kernel, whose weight
// prefetch suits the few rows of a decode step (the results are the same bits either way).
inline constexpr int64_t kQ8TilesFrom = 8;

// Weight rows per group (a task owns whole groups) and the tile: the avx512 set has 32 vector
// registers (16 accumulators and the 4 weight rows' codes, offsets or magnitudes and scales), the
// avx2 set 16, where a 2 x 2 tile (4 accumulators, 3 registers per weight row) runs a group in two.
inline constexpr int kQ8TileN = 4;
#if TESSEL_KERNEL_ISA_LEVEL >= 2
inline constexpr int kQ8TileM = 4, kQ8TileCols = 4;
#else
inline constexpr int kQ8TileM = 2, kQ8TileCols = 2;
#endif

// Activation codes per chunk: an L2-sized share, re-read from L2 for every weight group.
inline constexpr int64_t kQ8ChunkBytes = int64_t(1) << 19;

// vpmaddubsw + vpmaddwd: the weight's sign moved onto the activation, as quant_dot.h.
struct Q8PairSign {
  struct Weight {
    __m256i codes, magnitude;
  };
  static Weight weight(const uint8_t* codes) {
    const __m256i v = load256(codes);
    return {v, _mm256_abs_epi8(v)};
  }
  static __m256i act(const int8_t* x) { return load256(x); }
  static __m256i dot(const Weight& w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.magnitude, _mm256_sign_epi8(x, w.codes)),
                             _mm256_set1_epi16(1));
  }
};

// vpdpbusd on x + 128: sum (x + 128) w - 128 sum w = sum x w, exactly (no saturation, and the
// sums stay far inside int32). Dot is DotAvxVnni or DotVnni (quant_fused_rows.h).
template <class Dot>
struct Q8PairOffset {
  struct Weight {
    __m256i codes, minus_offset;  // the codes; -128 * each lane's sum of its 4 codes
  };
  static Weight weight(const uint8_t* codes) {
    const __m256i v = load256(codes);
    const __m256i offset = Dot::dot(_mm256_setzero_si256(), _mm256_set1_epi8(char(0x80)), v);
    return {v, _mm256_sub_epi32(_mm256_setzero_si256(), offset)};
  }
  static __m256i act(const int8_t* x) {
    return _mm256_xor_si256(load256(x), _mm256_set1_epi8(char(0x80)));
  }
  static __m256i dot(const Weight& w, __m256i x_plus_128) {
    return Dot::dot(w.minus_offset, x_plus_128, w.codes);
  }
};

// y[i * ldy + j] for kM activation rows (codes k apart, scales `blocks` apart) and kN weight
// rows (block g of row j at w + j * st.row + g * st.block), over all blocks.
template <class Pair, int kM, int kN>
inline void q8_0_tile(const uint8_t* w, quant::RowStrides st, const int8_t* x, int64_t k,
                      const float* dx, int64_t blocks, float* y, int64_t ldy) {
  __m256 acc[kM][kN];
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < kN; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t g = 0; g < blocks; ++g) {
    typename Pair::Weight wv[kN];
    __m256 sw[kN];
    for (int j = 0; j < kN; ++j) {
      const uint8_t* p = w + j * st.row + g * st.block;
      wv[j] = Pair::weight(p + 2);
      sw[j] = _mm256_set1_ps(load_half(p));
      // Hidden from the optimiser, which would otherwise turn each pair's product of two
      // broadcasts into a scalar multiply and a broadcast (the same bits, one more instruction).
      asm("" : "+v"(sw[j]));
    }
    for (int i = 0; i < kM; ++i) {
      const __m256i xv = Pair::act(x + i * k + 32 * g);
      const __m256 sx = _mm256_set1_ps(dx[i * blocks + g]);
      for (int j = 0; j < kN; ++j)
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Pair::dot(wv[j], xv)),
                                    _mm256_mul_ps(sw[j], sx), acc[i][j]);
    }
  }
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < kN; ++j) y[i * ldy + j] = hsum(acc[i][j]);
}

// The tile for `rows` (1..kQ8TileM) activation rows and kN weight rows.
template <class Pair, int kN>
inline void q8_0_tile_rows(int64_t rows, const uint8_t* w, quant::RowStrides st, const int8_t* x,
                           int64_t k, const float* dx, int64_t blocks, float* y, int64_t ldy) {
  switch (rows) {
    case 1:
      return q8_0_tile<Pair, 1, kN>(w, st, x, k, dx, blocks, y, ldy);
    case 2:
      return q8_0_tile<Pair, 2, kN>(w, st, x, k, dx, blocks, y, ldy);
#if TESSEL_KERNEL_ISA_LEVEL >= 2
    case 3:
      return q8_0_tile<Pair, 3, kN>(w, st, x, k, dx, blocks, y, ldy);
    default:
      return q8_0_tile<Pair, 4, kN>(w, st, x, k, dx, blocks, y, ldy);
#else
    default:
      return q8_0_tile<Pair, 2, kN>(w, st, x, k, dx, blocks, y, ldy);
#endif
  }
}

// The 256-bit tiles as the driver below takes them: `group` multiplies `rows` (at most kRows)
// activation rows with kQ8TileN weight rows, `column` with one.
template <class Pair>
struct Q8Tiles256 {
  static constexpr int64_t kRows = kQ8TileM;
  static void group(int64_t rows, const uint8_t* w, quant::RowStrides st, const int8_t* x,
                    int64_t k, const float* dx, int64_t blocks, float* y, int64_t ldy) {
    for (int j = 0; j < kQ8TileN; j += kQ8TileCols)
      q8_0_tile_rows<Pair, kQ8TileCols>(rows, w + j * st.row, st, x, k, dx, blocks, y + j, ldy);
  }
  static void column(int64_t rows, const uint8_t* w, quant::RowStrides st, const int8_t* x,
                     int64_t k, const float* dx, int64_t blocks, float* y, int64_t ldy) {
    q8_0_tile_rows<Pair, 1>(rows, w, st, x, k, dx, blocks, y, ldy);
  }
};

// The loop of the tile kernels over int8 activation rows (Q8_0 here, Q4_0 in quant_q4_tiles.h):
// whole groups of kN weight rows per task (so no output depends on the split), the activations
// in L2-sized chunks re-read from L2 for every group, kM rows a step: tile(i, rows, j0, cols)
// multiplies activation rows [i, i + rows) by weight rows [j0, j0 + cols).
template <class Tile>
void int8_tile_loop(int64_t m, int64_t n, int64_t k, int64_t kM, int64_t kN, int64_t group_grain,
                    Tile&& tile) {
  const int64_t chunk = std::max<int64_t>(kM, kQ8ChunkBytes / k / kM * kM);
  const int64_t groups = (n + kN - 1) / kN;
  parallel_for(0, groups, group_grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i0 = 0; i0 < m; i0 += chunk) {
      const int64_t i1 = std::min(m, i0 + chunk);
      for (int64_t gj = lo; gj < hi; ++gj) {
        const int64_t j0 = gj * kN, cols = std::min(kN, n - j0);
        for (int64_t i = i0; i < i1; i += kM) tile(i, std::min(kM, i1 - i), j0, cols);
      }
    }
  });
}

// y[m, n] = x[m, k] W[n, k]^T for Q8_0 rows of W (row_bytes apart, or with `interleaved` in
// groups of four interleaved by block: quant/row_interleave.h) and x already rounded to int8
// blocks (xq, dx: quantize_activation_row per row), in Tiles (Q8Tiles256 or the avx512 set's
// Q8Tiles512), through int8_tile_loop.
template <class Tiles>
void q8_0_tiles(int64_t m, int64_t n, int64_t k, int64_t row_bytes, bool interleaved,
                const int8_t* xq, const float* dx, const uint8_t* w, float* y,
                int64_t group_grain) {
  constexpr int64_t kN = kQ8TileN;
  static_assert(kN == quant::kInterleaveRows, "a tile group is an interleaved group");
  const int64_t blocks = k / kActBlock;
  const quant::RowStrides plain = quant::plain_strides(row_bytes, kQ8Bytes);
  const quant::RowStrides group = interleaved ? quant::interleaved_strides(kQ8Bytes) : plain;
  int8_tile_loop(m, n, k, Tiles::kRows, kN, group_grain,
                 [&](int64_t i, int64_t rows, int64_t j0, int64_t cols) {
                   const int8_t* xi = xq + i * k;
                   const float* dxi = dx + i * blocks;
                   float* yi = y + i * n + j0;
                   if (cols == kN) {
                     Tiles::group(rows, w + j0 * row_bytes, group, xi, k, dxi, blocks, yi, n);
                   } else {
                     for (int64_t c = 0; c < cols; ++c)
                       Tiles::column(rows, w + (j0 + c) * row_bytes, plain, xi, k, dxi, blocks,
                                     yi + c, n);
                   }
                 });
}

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
