// SPDX-License-Identifier: Apache-2.0
// Rows of A across the vector lanes (gemm_lanes.h). A is first packed transposed, lane group by
// lane group, zero-filled past its last row: P[p][g][l] = A[g L + l, p] (L x L transposes in
// registers, as the tiles' sums are on their way back into C's rows). A register tile is G
// lane groups by R rows of W (G R accumulators); one step of k loads G vectors of P and
// broadcasts R weights, each into G FMAs. Tasks own blocks of W's rows; within a row the weights
// are read 4 bytes a step, so every row of the tile prefetches a few cache lines ahead and,
// near its end, the start of the next tile's row: R streams are more than the hardware
// prefetcher follows at once. docs/KERNELS.md, "Rows across the lanes".
#include "tessel/kernels/cpu/gemm_lanes.h"

#include "tessel/core/cpu_features.h"
#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/gemm_invariant_tiles.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

#if TESSEL_KERNEL_ISA_LEVEL >= 1

namespace {

// The vector operations of the dot-product tiles' lanes (gemm_invariant_tiles.h).
using Lanes = invariant::F32Lanes;
using V = Lanes::V;
constexpr int kLanes = Lanes::kLanes;

// W rows per tile for G lane groups: G R accumulators and G vectors of P in the registers (32
// zmm; 16 ymm, with one more for the broadcast weight). One avx512 group takes 16 rows, not the
// 24 its registers hold: each row of the tile is a pointer, and 24 of them outran the 16 general
// registers, so about half were reloaded from the stack at every step of k (16 rows: 1.10x the
// FMA rate from L2, 1.03-1.05x a 16-row decode step's products, docs/KERNELS.md).
constexpr int rows_for(int groups) {
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  return groups == 1 ? 16 : groups == 2 ? 12 : 8;
#else
  return groups == 1 ? 12 : groups == 2 ? 6 : 4;
#endif
}

constexpr int kMaxGroups = 3;
// One tile's sums: R x G vectors, the most of any G.
constexpr int kOutFloats = std::max({rows_for(1), 2 * rows_for(2), 3 * rows_for(3)}) * kLanes;
// Below this many rows the dot-product tiles do fewer FMAs per weight (m / kLanes of a vector
// each against one whole FMA here) and win; measured in docs/KERNELS.md.
constexpr int64_t kMinRows = kLanes / 2;
constexpr int64_t kLine = 16;  // floats per cache line
// Weights ahead of the step that each row prefetches: 8 cache lines, 16 on AMD before Zen 5.
// Into L2 on Intel's cores (the L1 fill buffers are fewer than R rows' lines in flight; into L1
// at 2 and 4 lines measured 1.0-1.1x slower on the Xeons) and on AMD's Zen 4 (a 16-row decode
// step's products at two threads 27.1-28.5 ms into L1, 23.1-24.9 into L2, family 0x19 model
// 0x11), into L1 on AMD's Zen 5 and later (family 0x1A: the step took 0.81-0.91x the time that
// way at two threads, 0.91-0.96x at one; kernel_set.h's prefetch_family). On the Zen 5, 16
// lines were no better than 8; on the Zen 4, 16 took the same step 21.2-21.4 ms against
// 22.1-23.0 at two threads, 40.6-41.5 against 42.4-43.4 at one. docs/KERNELS.md, "Rows across
// the lanes".
int64_t ahead_floats() {
  static const int64_t lines = prefetch_family() == PrefetchFamily::AmdBeforeZen5 ? 16 : 8;
  return lines * kLine;
}
bool prefetch_to_l1() {
  return prefetch_family() == PrefetchFamily::AmdZen5On;
}

// Weights per task at least: below this the fork/join costs more than the work.
constexpr int64_t kTaskWeights = int64_t(1) << 16;
// Skew classes for rows a multiple of 4 KiB apart (below): 4, or 2 on AMD's cores, where the
// classes' extra loads of P cost more than the sets they spread over save (Zen 5 EPYC, one
// thread, 16 rows against 768 x 3072 and 768 x 2048 from L3: 4 classes 113-116 GFLOP/s, 2 classes
// 143-146, as fast as rows that are not a multiple of 4 KiB apart, 147; docs/KERNELS.md).
constexpr int kSkew = 4;
int skew_classes() {
  static const int classes = cpu_features().vendor == "AuthenticAMD" ? 2 : kSkew;
  return classes;
}

// acc[g][r] += W[r, p + o(r)] P[p + o(r)][g] over p in [p0, p1), where row r belongs to skew
// class c = r % S and o(r) = c kLine. When W's rows are a multiple of 4 KiB apart, the R weights
// of one p fall into one L1 set, more lines than its ways, and every broadcast misses L1; S
// classes one cache line apart spread them over S sets for S - 1 more loads of P a step.
template <int G, int R, int S>
inline void steps(V (&acc)[G][R], const float* pa, const float* w, int64_t ldw, int64_t p0,
                  int64_t p1) {
#pragma GCC unroll 16
  for (int64_t p = p0; p < p1; ++p) {
    V av[S][G];
#pragma GCC unroll 4
    for (int c = 0; c < S; ++c)
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) av[c][g] = Lanes::load(pa + ((p + c * kLine) * G + g) * kLanes);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const V wv = Lanes::broadcast(w + r * ldw + p + (r % S) * kLine);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[g][r] = Lanes::fma(av[r % S][g], wv, acc[g][r]);
    }
  }
}

// out[r][g L + l] = sum over p of W[r, p] P[p][g][l], for R rows of W from `w` (rows ldw apart)
// in S skew classes (steps()); `next` is the first row of the tile after this one (nullptr when
// none), whose first lines are prefetched as this tile's rows run out; into L1 when kL1.
template <int G, int R, int S, bool kL1 = false>
void tile(const float* pa, const float* w, int64_t ldw, int64_t k, const float* next, float* out) {
  V acc[G][R];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[g][r] = Lanes::zero();
  // Every class runs p over [0, body); class c covers [c kLine, body + c kLine) of k.
  const int64_t body = (k - (S - 1) * kLine) / kLine * kLine;
  const int64_t distance = ahead_floats();
  for (int64_t p = 0; p < body; p += kLine) {
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const int64_t ahead = p + (r % S) * kLine + distance;
      const float* target = ahead < k ? w + r * ldw + ahead
                            : next    ? next + r * ldw + (ahead - k)
                                      : nullptr;
      if (target == nullptr) continue;
      if constexpr (kL1)
        _mm_prefetch(reinterpret_cast<const char*>(target), _MM_HINT_T0);
      else
        _mm_prefetch(reinterpret_cast<const char*>(target), _MM_HINT_T1);
    }
    steps<G, R, S>(acc, pa, w, ldw, p, p + kLine);
  }
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) Lanes::store(out + (r * G + g) * kLanes, acc[g][r]);
  // What each row's class left: [0, c kLine) and [body + c kLine, k).
  for (int r = 0; r < R; ++r) {
    const int64_t o = (r % S) * kLine;
    for (int g = 0; g < G; ++g) {
      V sum = Lanes::load(out + (r * G + g) * kLanes);
      auto add = [&](int64_t q) {
        sum = Lanes::fma(Lanes::load(pa + (q * G + g) * kLanes), Lanes::broadcast(w + r * ldw + q),
                         sum);
      };
      for (int64_t q = 0; q < o; ++q) add(q);
      for (int64_t q = body + o; q < k; ++q) add(q);
      Lanes::store(out + (r * G + g) * kLanes, sum);
    }
  }
}

using TileFn = void (*)(const float*, const float*, int64_t, int64_t, const float*, float*);

template <int G, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> tiles_of(std::index_sequence<I...>) {
  return {tile<G, int(I) + 1, 1>...};
}
// [R - 1] per G: the full tile and every shorter one for the last rows of a block.
const std::array<TileFn, size_t(rows_for(1))> kTiles1 =
    tiles_of<1>(std::make_index_sequence<size_t(rows_for(1))>());
const std::array<TileFn, size_t(rows_for(2))> kTiles2 =
    tiles_of<2>(std::make_index_sequence<size_t(rows_for(2))>());
const std::array<TileFn, size_t(rows_for(3))> kTiles3 =
    tiles_of<3>(std::make_index_sequence<size_t(rows_for(3))>());
// Full tiles in kSkew (or 2) classes, for rows a multiple of 4 KiB apart.
const std::array<TileFn, kMaxGroups> kSkewed = {
    tile<1, rows_for(1), kSkew>, tile<2, rows_for(2), kSkew>, tile<3, rows_for(3), kSkew>};
const std::array<TileFn, kMaxGroups> kSkewed2 = {tile<1, rows_for(1), 2>, tile<2, rows_for(2), 2>,
                                                 tile<3, rows_for(3), 2>};
// The full tiles prefetching into L1 (prefetch_to_l1; the short last tiles keep L2).
const std::array<TileFn, kMaxGroups> kFullL1 = {
    tile<1, rows_for(1), 1, true>, tile<2, rows_for(2), 1, true>, tile<3, rows_for(3), 1, true>};
const std::array<TileFn, kMaxGroups> kSkewedL1 = {tile<1, rows_for(1), kSkew, true>,
                                                  tile<2, rows_for(2), kSkew, true>,
                                                  tile<3, rows_for(3), kSkew, true>};
const std::array<TileFn, kMaxGroups> kSkewed2L1 = {
    tile<1, rows_for(1), 2, true>, tile<2, rows_for(2), 2, true>, tile<3, rows_for(3), 2, true>};

TileFn tile_fn(int groups, int rows) {
  if (groups == 1) return kTiles1[size_t(rows - 1)];
  if (groups == 2) return kTiles2[size_t(rows - 1)];
  return kTiles3[size_t(rows - 1)];
}

// Within each 128-bit lane: unpack_lo(a, b) = a0 b0 a1 b1, unpack_hi = a2 b2 a3 b3, pairs<imm>
// two elements of a and two of b chosen by imm (shufps).
#if TESSEL_KERNEL_ISA_LEVEL >= 2
// Masked forms: GCC 12 warns that the unmasked ones use an uninitialized pass-through operand.
inline V unpack_lo(V a, V b) {
  return _mm512_maskz_unpacklo_ps(__mmask16(0xffff), a, b);
}
inline V unpack_hi(V a, V b) {
  return _mm512_maskz_unpackhi_ps(__mmask16(0xffff), a, b);
}
template <int kImm>
V pairs(V a, V b) {
  return _mm512_shuffle_ps(a, b, kImm);
}
#else
inline V unpack_lo(V a, V b) {
  return _mm256_unpacklo_ps(a, b);
}
inline V unpack_hi(V a, V b) {
  return _mm256_unpackhi_ps(a, b);
}
template <int kImm>
V pairs(V a, V b) {
  return _mm256_shuffle_ps(a, b, kImm);
}
#endif

// An L x L block transposed in registers (unpack within 128-bit lanes, then exchange the lanes):
// column j of the L rows at `a` (lda apart; rows from `rows` on read as zeros) becomes the vector
// at p + j width, for the columns j < cols. It packs A into P and turns a tile's sums back into
// rows of C.
inline void transpose_block(const float* a, int64_t lda, int64_t rows, float* p, int64_t width,
                            int64_t cols = kLanes) {
  V r[kLanes];
  for (int i = 0; i < kLanes; ++i) r[i] = i < rows ? Lanes::load(a + i * lda) : Lanes::zero();
  V t[kLanes], u[kLanes];
  for (int i = 0; i < kLanes / 2; ++i) {
    t[2 * i] = unpack_lo(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = unpack_hi(r[2 * i], r[2 * i + 1]);
  }
  // u[4b + j], 128-bit lane c: rows 4b..4b+3 of column 4c + j.
  for (int b = 0; b < kLanes / 4; ++b) {
    u[4 * b + 0] = pairs<_MM_SHUFFLE(1, 0, 1, 0)>(t[4 * b], t[4 * b + 2]);
    u[4 * b + 1] = pairs<_MM_SHUFFLE(3, 2, 3, 2)>(t[4 * b], t[4 * b + 2]);
    u[4 * b + 2] = pairs<_MM_SHUFFLE(1, 0, 1, 0)>(t[4 * b + 1], t[4 * b + 3]);
    u[4 * b + 3] = pairs<_MM_SHUFFLE(3, 2, 3, 2)>(t[4 * b + 1], t[4 * b + 3]);
  }
  // Column 4c + j gathers lane c of u[j], u[4 + j], ... (one u per four rows).
  for (int j = 0; j < 4; ++j) {
#if TESSEL_KERNEL_ISA_LEVEL >= 2
    const V x0 = Lanes::shuffle_quarters<_MM_SHUFFLE(2, 0, 2, 0)>(u[j], u[4 + j]);
    const V x1 = Lanes::shuffle_quarters<_MM_SHUFFLE(3, 1, 3, 1)>(u[j], u[4 + j]);
    const V y0 = Lanes::shuffle_quarters<_MM_SHUFFLE(2, 0, 2, 0)>(u[8 + j], u[12 + j]);
    const V y1 = Lanes::shuffle_quarters<_MM_SHUFFLE(3, 1, 3, 1)>(u[8 + j], u[12 + j]);
    const V c[4] = {Lanes::shuffle_quarters<_MM_SHUFFLE(2, 0, 2, 0)>(x0, y0),
                    Lanes::shuffle_quarters<_MM_SHUFFLE(2, 0, 2, 0)>(x1, y1),
                    Lanes::shuffle_quarters<_MM_SHUFFLE(3, 1, 3, 1)>(x0, y0),
                    Lanes::shuffle_quarters<_MM_SHUFFLE(3, 1, 3, 1)>(x1, y1)};
#else
    const V c[2] = {_mm256_permute2f128_ps(u[j], u[4 + j], 0x20),
                    _mm256_permute2f128_ps(u[j], u[4 + j], 0x31)};
#endif
    for (int lane = 0; lane < kLanes / 4; ++lane)
      if (4 * lane + j < cols) Lanes::store(p + (4 * lane + j) * width, c[lane]);
  }
}

// P[p][g][l] = A[g L + l, p], zero past row m, at a 64-byte boundary of `buffer` (a vector of P
// must not straddle two cache lines: unaligned, the avx2 step ran 1.17x slower). The buffer is
// kept between calls and only grows; every element this call reads is written here.
const float* pack_transposed(const float* a, int64_t lda, int64_t m, int64_t k, int groups,
                             std::vector<float>& buffer) {
  const int64_t width = int64_t(groups) * kLanes;
  constexpr int64_t kAlign = 16;  // floats
  if (buffer.size() < size_t(k * width + kAlign)) buffer.resize(size_t(k * width + kAlign));
  float* p = buffer.data();
  p += (kAlign - (reinterpret_cast<uintptr_t>(p) / sizeof(float)) % kAlign) % kAlign;
  const int64_t whole = k / kLanes * kLanes;
  for (int g = 0; g < groups; ++g) {
    const int64_t rows = std::min<int64_t>(kLanes, m - int64_t(g) * kLanes);
    const float* ag = a + int64_t(g) * kLanes * lda;
    for (int64_t q = 0; q < whole; q += kLanes)
      transpose_block(ag + q, lda, rows, p + q * width + g * kLanes, width);
  }
  for (int64_t q = whole; q < k; ++q) {
    float* col = p + q * width;
    for (int64_t i = 0; i < m; ++i) col[i] = a[i * lda + q];
    for (int64_t i = m; i < width; ++i) col[i] = 0.0f;
  }
  return p;
}

}  // namespace

bool lanes_gemm_fits(const GemmDesc& d) {
  return !d.trans_a && d.trans_b && d.k > 0 && d.m >= kMinRows && d.m <= kMaxGroups * kLanes;
}

void lanes_gemm(const GemmDesc& d, const float* a, const float* w, float* c) {
  const int groups = int((d.m + kLanes - 1) / kLanes);
  const int rows = rows_for(groups);
  // Rows a multiple of 4 KiB apart take the skewed tiles where k leaves the classes a body.
  const bool skew = (d.ldb * int64_t(sizeof(float))) % 4096 == 0 && d.k >= 4 * kLine * kSkew;
  const bool l1 = prefetch_to_l1();
  const size_t gi = size_t(groups - 1);
  const bool two = skew_classes() == 2;
  const TileFn full =
      skew ? (l1 ? (two ? kSkewed2L1 : kSkewedL1)[gi] : (two ? kSkewed2 : kSkewed)[gi])
           : (l1 ? kFullL1[gi] : tile_fn(groups, rows));
  const float alpha = float(d.alpha), beta = float(d.beta);
  const bool plain = d.alpha == 1 && d.beta == 0;
  // Blocks of W's rows in whole tiles, enough weights per task.
  const int64_t tiles = (d.n + rows - 1) / rows;
  const int64_t grain = std::max<int64_t>(1, kTaskWeights / (int64_t(rows) * d.k));
  const int64_t width = int64_t(groups) * kLanes;
  // The calling thread's packing buffer, kept between calls: a fresh one per call was an
  // allocation of k x 64 bytes or more, zero-filled, on the serial path before every product.
  thread_local std::vector<float> packed;
  for (int64_t bt = 0; bt < d.batch; ++bt) {
    const float* pa = pack_transposed(a + bt * d.stride_a, d.lda, d.m, d.k, groups, packed);
    const float* wb = w + bt * d.stride_b;
    float* cb = c + bt * d.stride_c;
    parallel_for(0, tiles, grain, [&](int64_t lo, int64_t hi) {
      alignas(64) float out[kOutFloats];
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t j0 = t * rows;
        const int r = int(std::min<int64_t>(rows, d.n - j0));
        const float* next = t + 1 < hi ? wb + (j0 + rows) * d.ldb : nullptr;
        (r == rows ? full : tile_fn(groups, r))(pa, wb + j0 * d.ldb, d.ldb, d.k, next, out);
        // The sums of a full block of L weight rows go back transposed in registers (what
        // scalar copies cost: 2-3% of a 16-sequence decode step); the rest element by element.
        int q0 = 0;
        if (plain)
          for (; q0 + kLanes <= r; q0 += kLanes)
            for (int g = 0; g < groups; ++g)
              transpose_block(out + q0 * width + g * kLanes, width, kLanes,
                              cb + g * kLanes * d.ldc + j0 + q0, d.ldc,
                              std::min<int64_t>(kLanes, d.m - g * kLanes));
        for (int64_t i = 0; i < d.m; ++i) {
          float* crow = cb + i * d.ldc + j0;
          for (int q = q0; q < r; ++q) {
            const float s = out[q * width + i];
            crow[q] = plain ? s : beta == 0 ? alpha * s : alpha * s + beta * crow[q];
          }
        }
      }
    });
  }
}

#else  // the baseline set has no FMA: never taken

bool lanes_gemm_fits(const GemmDesc&) {
  return false;
}
void lanes_gemm(const GemmDesc&, const float*, const float*, float*) {
  TESSEL_CHECK(false, "gemm: the baseline kernel set has no lane-form product");
}

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
TESSEL_ISA_END
