// SPDX-License-Identifier: Apache-2.0
// Q4_K, Q5_K and Q6_K weights times a prompt's activation rows as a register-blocked GEMM (the
// micro-kernel structure of Goto and van de Geijn, "Anatomy of High-Performance Matrix
// Multiplication", on the k-quant blocks), as quant_q8_tiles.h does for Q8_0. The fused rows of
// quant_fused_rows.h multiply four weight rows with one activation row at a time, so each
// 32-weight block is unpacked (nibbles masked and shifted, Q5_K's fifth and Q6_K's top bits moved
// into place) again for every activation row, and each row's scales are multiplied by the
// activation's dx in a pass of their own. Here a tile of activation rows x weight rows keeps its
// accumulators in registers: each block is unpacked once per tile and used by every activation
// row, each activation block loaded once and used by every weight row (the scale products
// sc * dx: a per-tile list here, registers in the 512-bit tiles). Cache blocking as the
// Q8_0 tiles: a group of kKTileN weight rows stays in L1 while the tiles of an activation chunk
// (kKChunkBytes of codes, L2) pass over it.
//
// Every output gets exactly the fused row's operations in its order: per 32-weight block the
// same exact int32 lane sums (Q6_K's starting from its zero-point lanes zx), converted, times
// f32(sc) * dx (the product scales_times_dx forms), one FMA into the even-block or odd-block
// accumulator (Q4_K / Q5_K: sub-blocks 2c, 2c+1; Q6_K: quarters 0, 2 and 1, 3), the two added
// and reduced by the same horizontal sum; the driver then subtracts Q4_K / Q5_K's offset_sum as
// the row path does. So a row gives the same bits alone (m < kKTilesFrom: the row kernels), in
// any tile and in a batch. Kernel-private: include inside TESSEL_ISA_BEGIN, after quant_fused.h
// and quant_fused_rows.h.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

#if TESSEL_KERNEL_ISA_LEVEL >= 1

// From this many activation rows the k-quants run in tiles (the same bits either way).
inline constexpr int64_t kKTilesFrom = 8;

// Weight rows per group (a task owns whole groups). The 256-bit tiles keep two accumulators per
// output (even and odd blocks): 4 x 2 outputs in the avx512 set's 32 registers, 2 x 2 in the
// avx2 set's 16.
inline constexpr int kKTileN = 4;
#if TESSEL_KERNEL_ISA_LEVEL >= 2
inline constexpr int kKTileM = 4, kKTileCols = 2;
#else
inline constexpr int kKTileM = 2, kKTileCols = 2;
#endif

// Activation codes per chunk: an L2-sized share, re-read from L2 for every weight group.
inline constexpr int64_t kKChunkBytes = int64_t(1) << 19;

// What a tile reads and writes: its first weight row (block b of row j at j * st.row +
// b * st.block: plain rows or a group interleaved four rows at a time, quant/row_interleave.h)
// and their f32 block scales (RowScales::scale, sc_stride apart), its first activation row's codes
// (rows k apart), block scales (rows `blocks` apart) and, for Q6_K, zero-point lanes (rows 8 *
// blocks apart), and y (rows ldy apart).
struct KTile {
  const uint8_t* w;
  quant::RowStrides st;
  const float* sc;
  int64_t sc_stride;
  const int8_t* x;
  int64_t k;
  const float* dx;
  int64_t blocks;
  const int32_t* zx;
  float* y;
  int64_t ldy;

  KTile cols(int64_t j) const {
    KTile t = *this;
    t.w += j * st.row, t.sc += j * sc_stride, t.y += j;
    return t;
  }
  KTile rows(int64_t i) const {
    KTile t = *this;
    t.x += i * k, t.dx += i * blocks, t.y += i * ldy;
    if (t.zx) t.zx += i * 8 * blocks;
    return t;
  }
};

// Q4_K / Q5_K sub-block 2c + e of the super-block at p, as q4_k_rows unpacks it.
template <bool kFive>
inline __m256i q4_k_codes(const uint8_t* p, int c, int e) {
  const __m256i mask = _mm256_set1_epi8(0xF);
  const __m256i v = load256(p + (kFive ? 48 : 16) + 32 * c);
  __m256i u = _mm256_and_si256(e ? _mm256_srli_epi16(v, 4) : v, mask);
  if constexpr (kFive) {
    const __m256i hb = _mm256_srli_epi16(load256(p + 16), 2 * c);
    u = _mm256_or_si256(u, _mm256_and_si256(e ? _mm256_slli_epi16(hb, 3) : _mm256_slli_epi16(hb, 4),
                                            _mm256_set1_epi8(0x10)));
  }
  return u;
}

// Q6_K quarter q of half h of the super-block at p, as q6_k_rows unpacks it.
inline __m256i q6_k_codes(const uint8_t* p, int h, int q) {
  const __m256i mask = _mm256_set1_epi8(0xF), top = _mm256_set1_epi8(0x30);
  const __m256i a = load256(p + 64 * h + 32 * (q & 1)), hv = load256(p + 128 + 32 * h);
  const __m256i lo = _mm256_and_si256(q < 2 ? a : _mm256_srli_epi16(a, 4), mask);
  const __m256i hs = q == 0   ? _mm256_slli_epi16(hv, 4)
                     : q == 1 ? _mm256_slli_epi16(hv, 2)
                     : q == 2 ? hv
                              : _mm256_srli_epi16(hv, 2);
  return _mm256_or_si256(lo, _mm256_and_si256(hs, top));
}

// kM activation rows x kN weight rows of type kType (Q4_K, Q5_K or Q6_K). The products
// sc * dx go into a small per-thread list first (scales_times_dx, as the rows do, 8 at a time),
// read by the FMAs as broadcasts from L1: a multiply per block and output in registers, as the
// 512-bit tiles do, left the 256-bit tiles no faster than the rows.
template <class Dot, quant::QuantType kType, int kM, int kN>
inline void k_tile(const KTile& t) {
  constexpr bool kSix = kType == quant::QuantType::Q6_K;
  const int64_t per_row = kSix ? 2 * t.blocks : t.blocks;
  thread_local std::vector<float> buffer;
  buffer.resize(size_t(std::max<int64_t>(int64_t(buffer.size()), kM * kN * per_row)));
  float* const sdx = buffer.data();
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < kN; ++j)
      scales_times_dx(t.sc + j * t.sc_stride, kSix, t.dx + i * t.blocks, t.blocks,
                      sdx + (i * kN + j) * per_row);
  __m256 acc[2][kM][kN];
  for (int e = 0; e < 2; ++e)
    for (int i = 0; i < kM; ++i)
      for (int j = 0; j < kN; ++j) acc[e][i][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < t.blocks / 8; ++b)
    for (int s = 0; s < 8; ++s) {  // block g of the row: sub-block s (Q6_K: half s/4, quarter s%4)
      const int64_t g = 8 * b + s;
      __m256i u[kN];
      for (int j = 0; j < kN; ++j) {
        const uint8_t* p = t.w + j * t.st.row + b * t.st.block;
        if constexpr (kSix)
          u[j] = q6_k_codes(p, s / 4, s % 4);
        else
          u[j] = q4_k_codes<kType == quant::QuantType::Q5_K>(p, s / 2, s % 2);
      }
      for (int i = 0; i < kM; ++i) {
        const __m256i xv = load256(t.x + i * t.k + 32 * g);
        const __m256i init =
            kSix ? load256(t.zx + i * 8 * t.blocks + 8 * g) : _mm256_setzero_si256();
        for (int j = 0; j < kN; ++j) {
          const float* sij = sdx + (i * kN + j) * per_row;
          const __m256 scale = kSix ? pair_scales(sij + 2 * g) : _mm256_broadcast_ss(sij + g);
          acc[s & 1][i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::dot(init, u[j], xv)), scale,
                                             acc[s & 1][i][j]);
        }
      }
    }
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < kN; ++j)
      t.y[i * t.ldy + j] = hsum(_mm256_add_ps(acc[0][i][j], acc[1][i][j]));
}

// `rows` (1..kRows) activation rows x kN weight rows: one full tile or single rows.
template <int kRows, int kN, class Tile>
inline void k_tile_rows(int64_t rows, const KTile& t, Tile tile) {
  if (rows == kRows) return tile.template operator()<kRows, kN>(t);
  for (int64_t i = 0; i < rows; ++i) tile.template operator()<1, kN>(t.rows(i));
}

// The 256-bit tiles as the driver below takes them: `group` multiplies `rows` (at most kRows)
// activation rows with kKTileN weight rows, `column` with one.
template <class Dot, quant::QuantType kType>
struct KTiles256 {
  static constexpr int64_t kRows = kKTileM;
  static constexpr auto kTile = []<int kM, int kN>(const KTile& t) {
    k_tile<Dot, kType, kM, kN>(t);
  };
  static void group(int64_t rows, const KTile& t) {
    for (int j = 0; j < kKTileN; j += kKTileCols)
      k_tile_rows<kKTileM, kKTileCols>(rows, t.cols(j), kTile);
  }
  static void column(int64_t rows, const KTile& t) { k_tile_rows<kKTileM, 1>(rows, t, kTile); }
};

// The driver's inputs: the activations rounded once per call (xq, dx), their per-block sums
// (xs32: Q4_K / Q5_K's offsets) or zero-point lanes (zx: Q6_K), W's rows row_bytes apart or,
// with `interleaved`, in groups of four interleaved by super-block (quant/row_interleave.h).
struct KTilesArgs {
  quant::QuantType type;
  int64_t m, n, k, row_bytes;
  bool interleaved;
  const int8_t* xq;
  const float* dx;
  const float* xs32;
  const int32_t* zx;
  const uint8_t* w;
  float* y;
  int64_t group_grain;
};

// y[m, n] = x[m, k] W[n, k]^T in Tiles (KTiles256 or the avx512 set's KTiles512). Whole groups
// of kKTileN weight rows per task, so no output depends on the split; per group and chunk the
// rows' f32 scales (row_scales), shared by every tile of the chunk.
template <class Tiles>
void k_quant_tiles(const KTilesArgs& a) {
  constexpr int64_t kM = Tiles::kRows, kN = kKTileN;
  const int64_t blocks = a.k / kActBlock;
  const bool mins = a.type != quant::QuantType::Q6_K;
  const int64_t per_row = mins ? blocks : 2 * blocks;
  const int64_t chunk = std::max<int64_t>(kM, kKChunkBytes / a.k / kM * kM);
  const int64_t groups = (a.n + kN - 1) / kN;
  static_assert(kN == quant::kInterleaveRows, "a tile group is an interleaved group");
  const int64_t block_bytes = a.row_bytes / (a.k / 256);
  parallel_for(0, groups, a.group_grain, [&](int64_t lo, int64_t hi) {
    RowScales rs[kN];
    std::vector<float> sc(size_t(kN * per_row));
    for (int64_t i0 = 0; i0 < a.m; i0 += chunk) {
      const int64_t i1 = std::min(a.m, i0 + chunk);
      for (int64_t gj = lo; gj < hi; ++gj) {
        const int64_t j0 = gj * kN, cols = std::min(kN, a.n - j0);
        // A whole group of an interleaved matrix is interleaved; the rows after it are plain.
        const quant::RowStrides st = a.interleaved && cols == kN
                                         ? quant::interleaved_strides(block_bytes)
                                         : quant::plain_strides(a.row_bytes, block_bytes);
        for (int64_t c = 0; c < cols; ++c) {
          row_scales(a.type, a.w + j0 * a.row_bytes + c * st.row, a.k, rs[c], st.block);
          std::copy(rs[c].scale.begin(), rs[c].scale.end(), sc.begin() + c * per_row);
        }
        for (int64_t i = i0; i < i1; i += kM) {
          const KTile t{a.w + j0 * a.row_bytes,
                        st,
                        sc.data(),
                        per_row,
                        a.xq + i * a.k,
                        a.k,
                        a.dx + i * blocks,
                        blocks,
                        mins ? nullptr : a.zx + i * 8 * blocks,
                        a.y + i * a.n + j0,
                        a.n};
          const int64_t rows = std::min(kM, i1 - i);
          if (cols == kN) {
            Tiles::group(rows, t);
          } else {
            for (int64_t c = 0; c < cols; ++c) Tiles::column(rows, t.cols(c));
          }
        }
        if (mins)
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t c = 0; c < cols; ++c) {
              float& out = a.y[i * a.n + j0 + c];
              out = out - offset_sum(rs[c], a.xs32 + i * blocks, nullptr);
            }
      }
    }
  });
}

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
