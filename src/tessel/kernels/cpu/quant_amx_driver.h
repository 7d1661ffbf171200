// SPDX-License-Identifier: Apache-2.0
// The loop every AMX-INT8 quantized kernel runs from kTilesFrom activation rows (quant_amx.cpp:
// Q8_0 / Q4_0, quant_amx_k.cpp: Q4_K / Q5_K, quant_amx_q6_k.cpp: Q6_K), with the weight format a
// template parameter so that its packing and its f32 epilogue inline into the loop. Tasks own
// whole groups of 16 weight rows; per group and chunk of activation rows (kChunkBytes of codes,
// about L2) the format packs the group once into the tile layout, and every tile of activation
// rows in the chunk runs over it: one TDPBSSD per step of F::kStep codes (a block, or Q6_K's half
// block), two in flight (tmm0-2, tmm3-5), each rows x 16 block of exact int32 sums handed to the
// format's epilogue in step order. So a format says only how it packs and scales.
//
// A last partial tile (m % 16 rows) reads zero-padded copies of the codes and per-block values,
// and runs on tiles of the fewest whole quarters of 16 rows that hold it (tile_config's `rows`):
// 4 activation rows take a 4-row TDPBSSD and 4 rows of epilogue, not 16. The rows are
// independent in a tile product and the epilogue, so a row's bits never depend on the tile height.
// Kernel-private: included by those three files only.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/quant_amx_common.h"

namespace tessel::kernels::cpu::amx {

// Per-block f32 values of the activation rows (`blocks` per row): v[0] the scales dx, v[1] for
// the k-quants with mins dx times the block's code sum; unused ones null.
struct RowValues {
  const float* v[2];
};

// One product y[m, n] = x[m, k] W[n, k]^T: x as int8 codes (xq, k per row) and row values.
struct Problem {
  int64_t m, n, k, blocks, row_bytes;
  const int8_t* xq;
  RowValues xv;
  const uint8_t* w;
  float* y;
};

// A format F gives:
//   static constexpr int kStep;          codes per TDPBSSD (K bytes of an activation tile row)
//   static constexpr int kRowValues;     how many of RowValues::v it reads (1 or 2)
//   static constexpr int kScaleVectors;  f32 vectors of 16 weight rows it keeps per block
//   void pack(const uint8_t* w, int64_t row_bytes, int cols, int64_t blocks, int8_t* packed,
//             float* scales) const;  the group of `cols` rows at w: its steps in tile layout
//             (kStep * 16 bytes each; rows past cols zero) and kScaleVectors * 16 floats a block
//   template <int R> void scale(const int32_t* sums, const float* scales, const RowValues& xv,
//             int64_t blocks, int64_t step, __m512 (&acc)[kRows]) const;  adds step `step`'s R
//             x 16 sums (rows 64 bytes apart) into acc[0 .. R - 1]

// R activation rows (codes k apart) times a packed group; the first `rows` x `cols` outputs
// stored at y (ldy apart).
template <class F, int R>
TESSEL_AMX_TARGET void tile(const F& f, const int8_t* x, const RowValues& xv, int64_t k,
                            int64_t blocks, const int8_t* packed, const float* scales, float* y,
                            int64_t ldy, int64_t rows, int cols) {
  constexpr int64_t kStepPacked = int64_t(F::kStep) * kCols;
  alignas(64) int32_t s0[R * kCols], s1[R * kCols];
  __m512 acc[kRows];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t steps = k / F::kStep;
  int64_t s = 0;
  for (; s + 1 < steps; s += 2) {
    _tile_loadd(0, x + F::kStep * s, k);
    _tile_loadd(1, packed + s * kStepPacked, 64);
    _tile_zero(2);
    _tile_dpbssd(2, 0, 1);
    _tile_loadd(3, x + F::kStep * (s + 1), k);
    _tile_loadd(4, packed + (s + 1) * kStepPacked, 64);
    _tile_zero(5);
    _tile_dpbssd(5, 3, 4);
    _tile_stored(2, s0, 64);
    _tile_stored(5, s1, 64);
    f.template scale<R>(s0, scales, xv, blocks, s, acc);
    f.template scale<R>(s1, scales, xv, blocks, s + 1, acc);
  }
  if (s < steps) {
    _tile_loadd(0, x + F::kStep * s, k);
    _tile_loadd(1, packed + s * kStepPacked, 64);
    _tile_zero(2);
    _tile_dpbssd(2, 0, 1);
    _tile_stored(2, s0, 64);
    f.template scale<R>(s0, scales, xv, blocks, s, acc);
  }
  const __mmask16 real = __mmask16((1u << cols) - 1);
  for (int i = 0; i < R; ++i)
    if (i < rows) _mm512_mask_storeu_ps(y + i * ldy, real, acc[i]);
}

// The tile height for `rows` activation rows: whole quarters of 16.
inline int tile_rows(int64_t rows) {
  return int((rows + 3) / 4 * 4);
}

// Groups [lo, hi) of 16 weight rows against every activation row, chunk by chunk. `tail`: the
// last m % 16 rows, zero-padded to 16.
template <class F>
TESSEL_AMX_TARGET void groups(const F& f, const Problem& p, const int8_t* tail_q,
                              const RowValues& tail_v, int64_t chunk_rows, int64_t lo, int64_t hi) {
  static const TileConfig configs[4] = {tile_config(F::kStep, 4), tile_config(F::kStep, 8),
                                        tile_config(F::kStep, 12), tile_config(F::kStep, 16)};
  int loaded = 0;  // the height the tile registers are configured for
  std::vector<int8_t> packed(size_t(p.k * kCols));
  std::vector<float> scales(size_t(F::kScaleVectors * p.blocks * kCols));
  for (int64_t i0 = 0; i0 < p.m; i0 += chunk_rows) {
    const int64_t i1 = std::min(p.m, i0 + chunk_rows);
    for (int64_t gj = lo; gj < hi; ++gj) {
      const int64_t j0 = gj * kCols;
      const int cols = int(std::min<int64_t>(kCols, p.n - j0));
      f.pack(p.w + j0 * p.row_bytes, p.row_bytes, cols, p.blocks, packed.data(), scales.data());
      for (int64_t i = i0; i < i1; i += kRows) {
        const int64_t rows = std::min<int64_t>(kRows, i1 - i);
        float* y = p.y + i * p.n + j0;
        const int r = rows == kRows ? kRows : tile_rows(rows);
        if (r != loaded) _tile_loadconfig(&configs[r / 4 - 1]);
        loaded = r;
        if (r == kRows) {
          const RowValues xv{
              {p.xv.v[0] + i * p.blocks, F::kRowValues > 1 ? p.xv.v[1] + i * p.blocks : nullptr}};
          const int8_t* x = rows == kRows ? p.xq + i * p.k : tail_q;
          tile<F, kRows>(f, x, rows == kRows ? xv : tail_v, p.k, p.blocks, packed.data(),
                         scales.data(), y, p.n, rows, cols);
        } else if (r == 4) {
          tile<F, 4>(f, tail_q, tail_v, p.k, p.blocks, packed.data(), scales.data(), y, p.n, rows,
                     cols);
        } else if (r == 8) {
          tile<F, 8>(f, tail_q, tail_v, p.k, p.blocks, packed.data(), scales.data(), y, p.n, rows,
                     cols);
        } else {
          tile<F, 12>(f, tail_q, tail_v, p.k, p.blocks, packed.data(), scales.data(), y, p.n, rows,
                      cols);
        }
      }
    }
  }
  _tile_release();
}

// The product from kTilesFrom activation rows: the tail copies, then groups of 16 weight rows in
// tasks of at least group_grain groups. `name` names the kernel in errors.
template <class F>
void tile_matmul(const F& f, const char* name, const Problem& p, int64_t group_grain) {
  TESSEL_CHECK(p.m >= kTilesFrom, name, ": m = ", p.m, " rows; the tiles take ", kTilesFrom,
               " or more");
  TESSEL_CHECK((kCols - 1) * p.row_bytes < (int64_t(1) << 31), name, ": rows of ", p.row_bytes,
               " bytes are too long for the 32-bit gather offsets");
  // Chunks of whole tiles, so only the last chunk can end in a partial tile.
  const int64_t chunk_rows = std::max<int64_t>(kRows, kChunkBytes / p.k / kRows * kRows);
  const int64_t tail = p.m % kRows, first = p.m - tail;
  std::vector<int8_t> tail_q;
  std::vector<float> tail_v[2];
  RowValues tv{{nullptr, nullptr}};
  if (tail > 0) {
    tail_q.assign(size_t(kRows * p.k), 0);
    std::memcpy(tail_q.data(), p.xq + first * p.k, size_t(tail * p.k));
    for (int v = 0; v < F::kRowValues; ++v) {
      tail_v[v].assign(size_t(kRows * p.blocks), 0.0f);
      std::memcpy(tail_v[v].data(), p.xv.v[v] + first * p.blocks,
                  size_t(tail * p.blocks) * sizeof(float));
      tv.v[v] = tail_v[v].data();
    }
  }
  const int64_t group_count = (p.n + kCols - 1) / kCols;
  parallel_for(0, group_count, group_grain, [&](int64_t lo, int64_t hi) {
    groups(f, p, tail_q.data(), tv, chunk_rows, lo, hi);
  });
}

// Below kTilesFrom rows each format's few-rows kernel: fn(j0, cols) per group of 16 weight rows,
// in tasks of at least group_grain groups.
template <class Fn>
void each_group(int64_t n, int64_t group_grain, const Fn& fn) {
  parallel_for(0, (n + kCols - 1) / kCols, group_grain, [&](int64_t lo, int64_t hi) {
    for (int64_t gj = lo; gj < hi; ++gj)
      fn(gj * kCols, int(std::min<int64_t>(kCols, n - gj * kCols)));
  });
}

}  // namespace tessel::kernels::cpu::amx
