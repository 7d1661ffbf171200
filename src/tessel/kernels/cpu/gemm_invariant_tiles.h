// SPDX-License-Identifier: Apache-2.0
// Register tiles of the batch-invariant product (gemm_invariant.h): MR rows of A against NR rows
// of a weight W stored [n, k], each output element a dot product over k with one fixed shape.
// Lane l of an element's vector accumulator takes elements l, l + L, l + 2L, ... in order by FMA
// (the last, partial vector zero-filled), then the L lanes are added in one fixed tree. Every
// tile shape runs exactly these operations per element, so which tile (and which thread) computes
// an element does not change its bits; only k and the kernel set (L, FMA or not) do. The tile
// shapes fill the set's vector registers: MR * NR accumulators + MR rows of A + one W vector.
// bf16 / f16 operands are widened exactly on load (avx2 and avx512 sets), which gives the same
// bits as the f32 tiles on widened copies; A and W may differ (f32 activations against a 16-bit
// weight read in place: the decode step's product).
// Kernel-private: include inside TESSEL_ISA_BEGIN.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu::invariant {

#if TESSEL_KERNEL_ISA_LEVEL >= 2
struct F32Lanes {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_part(const float* p, int n) {
    return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p);
  }
  static V fma(V a, V b, V acc) { return _mm512_fmadd_ps(a, b, acc); }
  static V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static float sum(V v) {
    const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // _mm512_shuffle_f32x4, without GCC 12's false "uninitialized" warning for its unmasked form.
  template <int kImm>
  static V shuffle_quarters(V a, V b) {
    return _mm512_maskz_shuffle_f32x4(__mmask16(0xffff), a, b, kImm);
  }
  // sum() of `count` <= 16 accumulators at once: the same additions, transposed (lanes l and
  // l + 8, then l + 4, l + 2, l + 1), so 15 vector additions serve 16 elements instead of 64
  // scalar-sized ones. Missing accumulators are zeros whose sums are dropped.
  static void sums(const V* acc, int count, float* out) {
    V x[16];
    for (int i = 0; i < 16; ++i) x[i] = i < count ? acc[i] : zero();
    V u[8], t[4], r[2];
    for (int i = 0; i < 8; ++i)  // u[i]: element 2i in lanes 0-7, 2i + 1 in lanes 8-15
      u[i] = _mm512_add_ps(shuffle_quarters<_MM_SHUFFLE(1, 0, 1, 0)>(x[2 * i], x[2 * i + 1]),
                           shuffle_quarters<_MM_SHUFFLE(3, 2, 3, 2)>(x[2 * i], x[2 * i + 1]));
    for (int i = 0; i < 4; ++i)  // t[i]: element 4i + g in lanes 4g..4g+3
      t[i] = _mm512_add_ps(shuffle_quarters<_MM_SHUFFLE(2, 0, 2, 0)>(u[2 * i], u[2 * i + 1]),
                           shuffle_quarters<_MM_SHUFFLE(3, 1, 3, 1)>(u[2 * i], u[2 * i + 1]));
    for (int i = 0; i < 2; ++i)  // r[i]: lanes 4g, 4g+1 element 8i + g; 4g+2, 4g+3 element 8i+4+g
      r[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // Lane 4g + p: element g + 4p.
    alignas(64) float f[16];
    _mm512_store_ps(f, _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1))));
    for (int e = 0; e < count; ++e) out[e] = f[(e % 4) * 4 + e / 4];
  }
};
// Rows per tile and W rows per tile for each row count (32 zmm registers).
inline constexpr int kMaxRows = 4, kMaxCols = 8;
constexpr int cols_for(int rows) {
  return rows >= 4 ? 6 : 8;
}
#elif TESSEL_KERNEL_ISA_LEVEL == 1
struct F32Lanes {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_part(const float* p, int n) {
    alignas(32) float buf[8] = {};
    std::memcpy(buf, p, size_t(n) * sizeof(float));
    return _mm256_load_ps(buf);
  }
  static V fma(V a, V b, V acc) { return _mm256_fmadd_ps(a, b, acc); }
  static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // sum() of `count` <= 8 accumulators at once, transposed (lanes l and l + 4, l + 2, l + 1).
  static void sums(const V* acc, int count, float* out) {
    V x[8];
    for (int i = 0; i < 8; ++i) x[i] = i < count ? acc[i] : zero();
    V u[4], r[2];
    for (int i = 0; i < 4; ++i)  // u[i]: element 2i in lanes 0-3, 2i + 1 in lanes 4-7
      u[i] = _mm256_add_ps(_mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x20),
                           _mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x31));
    for (int i = 0; i < 2; ++i)  // r[i]: lanes 4h, 4h+1 element 4i + h; 4h+2, 4h+3 element 4i+2+h
      r[i] = _mm256_add_ps(_mm256_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm256_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // Lane 4h + p: element h + 2p.
    alignas(32) float f[8];
    _mm256_store_ps(f, _mm256_add_ps(_mm256_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm256_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1))));
    for (int e = 0; e < count; ++e) out[e] = f[(e % 2) * 4 + e / 2];
  }
};
// 16 ymm registers.
inline constexpr int kMaxRows = 3, kMaxCols = 8;
constexpr int cols_for(int rows) {
  return rows >= 3 ? 4 : rows == 2 ? 5 : 8;
}
#else
struct F32Lanes {
  using V = __m128;
  static constexpr int kLanes = 4;
  static V zero() { return _mm_setzero_ps(); }
  static V load(const float* p) { return _mm_loadu_ps(p); }
  static V load_part(const float* p, int n) {
    alignas(16) float buf[4] = {};
    std::memcpy(buf, p, size_t(n) * sizeof(float));
    return _mm_load_ps(buf);
  }
  // No FMA below x86-64-v3: a rounded product, then the sum.
  static V fma(V a, V b, V acc) { return _mm_add_ps(_mm_mul_ps(a, b), acc); }
  static float sum(V v) {
    __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void sums(const V* acc, int count, float* out) {
    for (int e = 0; e < count; ++e) out[e] = sum(acc[e]);
  }
};
// 16 xmm registers, one more for the product.
inline constexpr int kMaxRows = 3, kMaxCols = 6;
constexpr int cols_for(int rows) {
  return rows >= 3 ? 3 : rows == 2 ? 4 : 6;
}
#endif

// out[e] = the lane sum of acc[e], for a tile's accumulators in row-major order.
template <typename S, int MR, int NR>
inline void finish(typename S::V (&acc)[MR][NR], float* out) {
  constexpr int kCount = MR * NR, kGroup = S::kLanes;
  for (int e = 0; e < kCount; e += kGroup)
    S::sums(&acc[0][0] + e, std::min(kGroup, kCount - e), out + e);
}

// Loads of L elements as f32 lanes: f32 itself, or bf16 / f16 widened in registers (exactly, so
// a widened tile gives the bits of the f32 tile on a widened copy).
struct F32Load {
  using T = float;
  static F32Lanes::V load(const float* p) { return F32Lanes::load(p); }
  static F32Lanes::V load_part(const float* p, int n) { return F32Lanes::load_part(p, n); }
};

#if TESSEL_KERNEL_ISA_LEVEL >= 2
inline __m256i load16(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m256i load16_part(const uint16_t* p, int n) {
  return _mm256_maskz_loadu_epi16(__mmask16((1u << n) - 1), p);
}
// The masked forms with a full mask avoid GCC 12's false "uninitialized" warnings of the plain
// ones.
inline __m512 bf16_lanes(__m256i h) {
  const __mmask16 all = 0xffff;
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16));
}
inline __m512 f16_lanes(__m256i h) {
  return _mm512_maskz_cvtph_ps(__mmask16(0xffff), h);
}
#elif TESSEL_KERNEL_ISA_LEVEL == 1
inline __m128i load16(const uint16_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
inline __m128i load16_part(const uint16_t* p, int n) {
  alignas(16) uint16_t buf[8] = {};
  std::memcpy(buf, p, size_t(n) * sizeof(uint16_t));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
}
inline __m256 bf16_lanes(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 f16_lanes(__m128i h) {
  return _mm256_cvtph_ps(h);
}
#endif

#if TESSEL_KERNEL_ISA_LEVEL >= 1
struct Bf16Load {
  using T = uint16_t;
  static F32Lanes::V load(const uint16_t* p) { return bf16_lanes(load16(p)); }
  static F32Lanes::V load_part(const uint16_t* p, int n) { return bf16_lanes(load16_part(p, n)); }
};
struct F16Load {
  using T = uint16_t;
  static F32Lanes::V load(const uint16_t* p) { return f16_lanes(load16(p)); }
  static F32Lanes::V load_part(const uint16_t* p, int n) { return f16_lanes(load16_part(p, n)); }
};
#endif

// How the tiles below prefetch W's rows, by CPU (kernel_set.h's prefetch_family): each step asks
// for the same place in the next tile's rows (the rows a pass over W reads next), into L2 or L1,
// in rows of at most 4 KiB (a few dozen lines per row end before the hardware prefetcher ramps up
// on each: "Prefetch of short rows", docs/KERNELS.md) and, where `long_rows`, in every row of the
// tiles of fewer than kMaxRows activation rows (the one pass over W of a decode step; from
// kMaxRows rows on, W's block is re-read from L2 and needs no prefetch).
//  - AMD's cores before Zen 5: into L2, long rows too. On a Zen 4 EPYC GPT-2 124M's one-row
//    decode step of f32 products from memory took 29.3-30.3 ms at one thread into L1 and
//    20.9-21.3 into L2 (docs/KERNELS.md, "Prefetch level by CPU"); with the long rows too, a
//    TinyLlama-shaped f32 decode went from 4.82-5.16 to 5.59-5.83 tokens/s (docs/BENCHMARKS.md,
//    "The invariant tiles' prefetch of long rows").
//  - Elsewhere: into L1, short rows only, as first measured (longer rows gained nothing there).
struct TilePrefetch {
  bool into_l2, long_rows;
};
inline const TilePrefetch& tile_prefetch() {
  static const TilePrefetch plan = prefetch_family() == PrefetchFamily::AmdBeforeZen5
                                       ? TilePrefetch{true, true}
                                       : TilePrefetch{false, false};
  return plan;
}

// out[r * NR + c] = dot(a row r, w row c) over k, for A loaded by ALoad and W by WLoad.
template <typename ALoad, typename WLoad, int MR, int NR>
void tile(const typename ALoad::T* a, int64_t lda, const typename WLoad::T* w, int64_t ldw,
          int64_t k, float* out) {
  using S = F32Lanes;
  typename S::V acc[MR][NR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NR; ++c) acc[r][c] = S::zero();
  const TilePrefetch& plan = tile_prefetch();
  const bool prefetch =
      ldw * int64_t(sizeof(typename WLoad::T)) <= 4096 || (plan.long_rows && MR < kMaxRows);
  const bool into_l2 = plan.into_l2;
  auto step = [&](int64_t p, int part) {
    typename S::V av[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
      av[r] = part ? ALoad::load_part(a + r * lda + p, part) : ALoad::load(a + r * lda + p);
#pragma GCC unroll 8
    for (int c = 0; c < NR; ++c) {
      // The same place in the next tile's rows of W (tile_prefetch).
      if (prefetch) {
        const char* next = reinterpret_cast<const char*>(w + (c + NR) * ldw + p);
        if (into_l2)
          _mm_prefetch(next, _MM_HINT_T1);
        else
          _mm_prefetch(next, _MM_HINT_T0);
      }
      const typename S::V wv =
          part ? WLoad::load_part(w + c * ldw + p, part) : WLoad::load(w + c * ldw + p);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) acc[r][c] = S::fma(av[r], wv, acc[r][c]);
    }
  };
  int64_t p = 0;
  for (; p + S::kLanes <= k; p += S::kLanes) step(p, 0);
  if (p < k) step(p, int(k - p));
  finish<S>(acc, out);
}

// Tile functions indexed [rows - 1][cols - 1], for any element types' tile template.
template <typename TA, typename TW>
using TileFn = void (*)(const TA*, int64_t, const TW*, int64_t, int64_t, float*);

template <typename ALoad, typename WLoad, size_t... I>
constexpr std::array<TileFn<typename ALoad::T, typename WLoad::T>, sizeof...(I)> tile_table(
    std::index_sequence<I...>) {
  return {tile<ALoad, WLoad, int(I) / kMaxCols + 1, int(I) % kMaxCols + 1>...};
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu::invariant
