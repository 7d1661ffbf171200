// SPDX-License-Identifier: Apache-2.0
// The batch-invariant product (gemm_invariant.h): tasks own blocks of W's rows (output columns),
// sized so a block stays in L2 while every group of A's rows passes over it; a task walks the
// groups of rows and, inside, the block's rows a register tile at a time. K is never split: each
// element is one whole dot product in a tile (gemm_invariant_tiles.h), so neither the blocking
// nor the thread count can change its reduction order. docs/SERVING.md has the cost.
#include "tessel/kernels/cpu/gemm_invariant.h"

#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/gemm_invariant_tiles.h"
#include "tessel/kernels/cpu/half_convert.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

namespace {

using invariant::cols_for;
using invariant::kMaxCols;
using invariant::kMaxRows;
using invariant::TileFn;

constexpr size_t kTiles = size_t(kMaxRows * kMaxCols);
using invariant::F32Load;
constexpr auto kSeq = std::make_index_sequence<kTiles>();
constexpr auto kF32Tiles = invariant::tile_table<F32Load, F32Load>(kSeq);
#if TESSEL_KERNEL_ISA_LEVEL >= 1
using invariant::Bf16Load;
using invariant::F16Load;
constexpr auto kBf16Tiles = invariant::tile_table<Bf16Load, Bf16Load>(kSeq);
constexpr auto kF16Tiles = invariant::tile_table<F16Load, F16Load>(kSeq);
// f32 activations against a 16-bit weight read in place (the quantized matmul's F16 / BF16).
constexpr auto kF32Bf16Tiles = invariant::tile_table<F32Load, Bf16Load>(kSeq);
constexpr auto kF32F16Tiles = invariant::tile_table<F32Load, F16Load>(kSeq);
#endif

// Bytes of W per block: it is re-read from L2 by every group of A's rows.
constexpr int64_t kBlockBytes = int64_t(1) << 19;
// Multiply-adds per task at least: below this the fork/join costs more than the work.
constexpr int64_t kTaskMacs = int64_t(1) << 17;

// W rows per block: a multiple of the widest tile's columns, at most kBlockBytes of W, and small
// enough that each thread gets two blocks.
int64_t block_cols(int64_t n, int64_t k, int64_t elem_bytes) {
  const int64_t cw = cols_for(kMaxRows);
  const int64_t by_cache = std::max<int64_t>(1, kBlockBytes / (k * elem_bytes * cw)) * cw;
  const int64_t blocks = 2 * int64_t(num_threads());
  const int64_t by_threads = (n + blocks - 1) / blocks;
  return std::max(cw, std::min(by_cache, (by_threads + cw - 1) / cw * cw));
}

// Runs fn(j0, j1) over the blocks of W's rows, in parallel.
template <typename Fn>
void for_blocks(int64_t m, int64_t n, int64_t k, int64_t elem_bytes, Fn&& fn) {
  const int64_t nb = block_cols(n, k, elem_bytes);
  const int64_t blocks = (n + nb - 1) / nb;
  const int64_t grain = std::max<int64_t>(1, kTaskMacs / std::max<int64_t>(1, m * nb * k));
  parallel_for(0, blocks, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) fn(b * nb, std::min(n, (b + 1) * nb));
  });
}

// Bytes of A's rows per pass over a block of W: they are re-read from L2 for every tile of W.
constexpr int64_t kRowBlockBytes = int64_t(1) << 20;

// Output columns [j0, j1) of every row: w points at W's row j0. store(i, j, sum) writes one.
// From kMaxRows rows on, a tile of W's rows meets every group of A's rows of a row block (in L2)
// before the next tile; fewer rows use wider tiles and one pass over W.
template <typename TA, typename TW, size_t N, typename Store>
void block(const std::array<TileFn<TA, TW>, N>& tiles, int64_t m, int64_t j0, int64_t j1, int64_t k,
           const TA* a, int64_t lda, const TW* w, int64_t ldw, Store&& store) {
  float out[kMaxRows * kMaxCols];
  auto tile = [&](int64_t i, int mr, int64_t j, int nr) {
    tiles[size_t((mr - 1) * kMaxCols + nr - 1)](a + i * lda, lda, w + (j - j0) * ldw, ldw, k, out);
    for (int r = 0; r < mr; ++r)
      for (int c = 0; c < nr; ++c) store(i + r, j + c, out[r * nr + c]);
  };
  if (m < kMaxRows) {
    const int full = cols_for(int(m));
    for (int64_t j = j0; j < j1; j += full)
      tile(0, int(m), j, int(std::min<int64_t>(full, j1 - j)));
    return;
  }
  const int full = cols_for(kMaxRows);
  const int64_t rows_per_block =
      std::max<int64_t>(1, kRowBlockBytes / (k * int64_t(sizeof(TA)) * kMaxRows)) * kMaxRows;
  for (int64_t i0 = 0; i0 < m; i0 += rows_per_block) {
    const int64_t i1 = std::min(m, i0 + rows_per_block);
    for (int64_t j = j0; j < j1; j += full) {
      const int nr = int(std::min<int64_t>(full, j1 - j));
      for (int64_t i = i0; i < i1; i += kMaxRows)
        tile(i, int(std::min<int64_t>(kMaxRows, i1 - i)), j, nr);
    }
  }
}

// C's element from the dot product: alpha * sum + beta * C (C not read when beta == 0).
struct Scale {
  float alpha, beta;
  bool plain;  // alpha == 1, beta == 0
  explicit Scale(const GemmDesc& d)
      : alpha(float(d.alpha)), beta(float(d.beta)), plain(d.alpha == 1 && d.beta == 0) {}
  float operator()(float sum, float old) const {
    return beta == 0 ? alpha * sum : alpha * sum + beta * old;
  }
};

template <typename H>
auto half_store(const GemmDesc& d, H* c) {
  return [c, ldc = d.ldc, scale = Scale(d)](int64_t i, int64_t j, float s) {
    H& dst = c[i * ldc + j];
    dst = from_float<H>(scale.plain ? s : scale(s, scale.beta == 0 ? 0.0f : to_float(dst)));
  };
}

void f32_gemm(const GemmDesc& d, const float* a, const float* b, float* c) {
  const Scale scale(d);
  for_blocks(d.m, d.n, d.k, sizeof(float), [&](int64_t j0, int64_t j1) {
    block(kF32Tiles, d.m, j0, j1, d.k, a, d.lda, b + j0 * d.ldb, d.ldb,
          [&](int64_t i, int64_t j, float s) {
            float& dst = c[i * d.ldc + j];
            dst = scale.plain ? s : scale(s, dst);
          });
  });
}

// From this many rows on, bf16 / f16 products widen into buffers (measured on 2304 x 768: 16 rows
// ran 1.25x faster widened in registers, 64 rows 1.3x faster widened into buffers).
constexpr int64_t kWidenRows = 32;

// bf16 / f16: fewer rows (decoding) read A and W in place and widen them in registers; more rows
// widen A once and W a block at a time into f32 buffers, which amortises the conversion over the
// rows. Both give the f32 tiles' bits on the exactly widened values, so the switch on m cannot
// change a row.
template <typename H>
void half_gemm(const GemmDesc& d, DType dt, const H* a, const H* b, H* c) {
  const auto store = half_store(d, c);
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  if (d.m < kWidenRows) {
    const auto& tiles = dt == DType::BF16 ? kBf16Tiles : kF16Tiles;
    const auto* a16 = reinterpret_cast<const uint16_t*>(a);
    const auto* b16 = reinterpret_cast<const uint16_t*>(b);
    for_blocks(d.m, d.n, d.k, sizeof(H), [&](int64_t j0, int64_t j1) {
      block(tiles, d.m, j0, j1, d.k, a16, d.lda, b16 + j0 * d.ldb, d.ldb, store);
    });
    return;
  }
#endif
  std::vector<float> af(size_t(d.m * d.k));
  half_rows_to_f32(a, dt, d.lda, af.data(), d.m, d.k);
  for_blocks(d.m, d.n, d.k, sizeof(float), [&](int64_t j0, int64_t j1) {
    std::vector<float> wf(size_t((j1 - j0) * d.k));
    half_rows_to_f32(b + j0 * d.ldb, dt, d.ldb, wf.data(), j1 - j0, d.k);
    block(kF32Tiles, d.m, j0, j1, d.k, af.data(), d.k, wf.data(), d.k, store);
  });
}

}  // namespace

bool invariant_gemm_fits(const GemmDesc& d) {
  return !d.trans_a && d.trans_b && d.k > 0;
}

void invariant_gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, Tensor& c) {
  const DType dt = c.dtype();
  TESSEL_CHECK(dt == DType::F32 || is_half(dt), "gemm: no batch-invariant ", dtype_name(dt),
               " product (f32, bf16, f16)");
  for (int64_t bt = 0; bt < d.batch; ++bt) {
    if (dt == DType::F32) {
      f32_gemm(d, a.data<float>() + bt * d.stride_a, b.data<float>() + bt * d.stride_b,
               c.data<float>() + bt * d.stride_c);
    } else if (dt == DType::BF16) {
      const auto* ap = static_cast<const BF16*>(a.data_ptr()) + bt * d.stride_a;
      const auto* bp = static_cast<const BF16*>(b.data_ptr()) + bt * d.stride_b;
      half_gemm(d, dt, ap, bp, static_cast<BF16*>(c.data_ptr()) + bt * d.stride_c);
    } else {
      const auto* ap = static_cast<const F16*>(a.data_ptr()) + bt * d.stride_a;
      const auto* bp = static_cast<const F16*>(b.data_ptr()) + bt * d.stride_b;
      half_gemm(d, dt, ap, bp, static_cast<F16*>(c.data_ptr()) + bt * d.stride_c);
    }
  }
}

void invariant_matmul_half(int64_t m, int64_t n, int64_t k, const float* x, int64_t lda, DType wt,
                           const uint16_t* w, int64_t ldw, float* y, int64_t ldy) {
  TESSEL_CHECK(is_half(wt), "invariant_matmul_half: the weight is ", dtype_name(wt),
               ", not bf16 or f16");
  const auto store = [&](int64_t i, int64_t j, float s) { y[i * ldy + j] = s; };
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  if (m < kWidenRows) {
    const auto& tiles = wt == DType::BF16 ? kF32Bf16Tiles : kF32F16Tiles;
    for_blocks(m, n, k, sizeof(uint16_t), [&](int64_t j0, int64_t j1) {
      block(tiles, m, j0, j1, k, x, lda, w + j0 * ldw, ldw, store);
    });
    return;
  }
#endif
  for_blocks(m, n, k, sizeof(float), [&](int64_t j0, int64_t j1) {
    std::vector<float> wf(size_t((j1 - j0) * k));
    half_rows_to_f32(w + j0 * ldw, wt, ldw, wf.data(), j1 - j0, k);
    block(kF32Tiles, m, j0, j1, k, x, lda, wf.data(), k, store);
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
TESSEL_ISA_END
