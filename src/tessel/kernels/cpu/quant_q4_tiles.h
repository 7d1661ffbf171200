// SPDX-License-Identifier: Apache-2.0
// Q4_0 weights times activation rows in register tiles, in the avx512 set where the CPU has no
// AMX-INT8 (or it is switched off): the register blocking of quant_q8_tiles.h (Goto and van de
// Geijn, "Anatomy of High-Performance Matrix Multiplication") for Q4_0's blocks, for every m. A
// tile of kM activation rows x kN weight rows unpacks each weight block's nibbles and reads its f16
// scale once, loads each activation block once, and keeps its kM x kN outputs' accumulators in
// registers; at m = 1 (the decode step) it is a pass over four weight rows sharing each activation
// block (the one-row kernel, q4_0_row, unpacks and scales per activation row and runs one row's FMA
// chain alone; the avx2 set keeps it: with its 16 vector registers these tiles measured slower than
// it).
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

// Activation codes per chunk: an L2-sized share, re-read from L2 for every weight group.
inline constexpr int64_t kQ4ChunkBytes = int64_t(1) << 19;

// y[i * ldy + j] for kM activation rows (codes k apart; scales and block sums `blocks` apart) and
// kN weight rows (row_bytes apart), over all blocks.
template <class Dot, int kM, int kN>
inline void q4_0_tile(const uint8_t* w, int64_t row_bytes, const int8_t* x, int64_t k,
                      const float* dx, const float* xs32, int64_t blocks, float* y, int64_t ldy) {
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
      const uint8_t* p = w + j * row_bytes + 18 * g;
      u[j] = q4_0_codes(p);
      d[j] = load_half(p);
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
template <class Dot, int kN>
inline void q4_0_tile_rows(int64_t rows, const uint8_t* w, int64_t row_bytes, const int8_t* x,
                           int64_t k, const float* dx, const float* xs32, int64_t blocks, float* y,
                           int64_t ldy) {
  if (rows >= 2) return q4_0_tile<Dot, 2, kN>(w, row_bytes, x, k, dx, xs32, blocks, y, ldy);
  q4_0_tile<Dot, 1, kN>(w, row_bytes, x, k, dx, xs32, blocks, y, ldy);
}

// y[m, n] = x[m, k] W[n, k]^T for Q4_0 rows of W (row_bytes apart), x already rounded to int8
// blocks (xq, dx) with its block sums xs32 (activation_block_sums). Whole groups of kQ4TileN
// weight rows per task, so no output depends on the split.
template <class Dot>
void q4_0_tiles(int64_t m, int64_t n, int64_t k, int64_t row_bytes, const int8_t* xq,
                const float* dx, const float* xs32, const uint8_t* w, float* y,
                int64_t group_grain) {
  constexpr int64_t kM = kQ4TileM, kN = kQ4TileN;
  const int64_t blocks = k / kActBlock;
  const int64_t chunk = std::max<int64_t>(kM, kQ4ChunkBytes / k / kM * kM);
  const int64_t groups = (n + kN - 1) / kN;
  parallel_for(0, groups, group_grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i0 = 0; i0 < m; i0 += chunk) {
      const int64_t i1 = std::min(m, i0 + chunk);
      for (int64_t gj = lo; gj < hi; ++gj) {
        const int64_t j0 = gj * kN, cols = std::min(kN, n - j0);
        for (int64_t i = i0; i < i1; i += kM) {
          const int64_t rows = std::min(kM, i1 - i);
          const int8_t* xi = xq + i * k;
          const float* dxi = dx + i * blocks;
          const float* xsi = xs32 + i * blocks;
          float* yi = y + i * n + j0;
          if (cols == kN) {
            for (int j = 0; j < kN; j += kQ4TileCols)
              q4_0_tile_rows<Dot, kQ4TileCols>(rows, w + (j0 + j) * row_bytes, row_bytes, xi, k,
                                               dxi, xsi, blocks, yi + j, n);
          } else {
            for (int64_t c = 0; c < cols; ++c)
              q4_0_tile_rows<Dot, 1>(rows, w + (j0 + c) * row_bytes, row_bytes, xi, k, dxi, xsi,
                                     blocks, yi + c, n);
          }
        }
      }
    }
  });
}

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
