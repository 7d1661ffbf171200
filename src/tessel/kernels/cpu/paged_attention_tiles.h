// SPDX-License-Identifier: Apache-2.0
// The f32 inner loops of paged attention (paged_attention.cpp): one query state's online-softmax
// update (Milakov & Gimelshein 2018) with one tile of keys, vectorised across the head dim. The
// keys and values are read where they lie in the pool, f32 or 16-bit: a bf16 / f16 pool's rows are
// widened in registers as they are loaded (exactly, so the bits are those of the f32 loops on a
// widened copy), never copied to a buffer first.
//
// Scores: each key's dot product with the query runs in one vector accumulator — lane l takes
// elements l, l + L, ... of the head dim in order by FMA, the last partial vector zero-filled —
// and the lanes of L keys' accumulators are added together, transposed, by the fixed tree of
// gemm_invariant_tiles.h (every key's lanes go through the same additions). Keys are taken in
// groups of L at fixed offsets of the tile, so a key's score depends only on the query, the key
// and the kernel set, never on its neighbours or on which rows share the call.
// Values: the state's accumulator is rescaled once and then takes p_t * v_t for the visible keys
// in position order, a few vectors of the head dim at a time held in registers.
// Kernel-private: include inside TESSEL_ISA_BEGIN, after gemm_invariant_tiles.h.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu::paged {

using Lanes = invariant::F32Lanes;
using Vec = Lanes::V;
constexpr int kL = Lanes::kLanes;

#if TESSEL_KERNEL_ISA_LEVEL >= 2
inline void store(float* p, Vec v) {
  _mm512_storeu_ps(p, v);
}
inline void store_part(float* p, Vec v, int n) {
  _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), v);
}
inline Vec broadcast(float x) {
  return _mm512_set1_ps(x);
}
inline Vec mul(Vec a, Vec b) {
  return _mm512_mul_ps(a, b);
}
#elif TESSEL_KERNEL_ISA_LEVEL == 1
inline void store(float* p, Vec v) {
  _mm256_storeu_ps(p, v);
}
inline void store_part(float* p, Vec v, int n) {
  alignas(32) float buf[8];
  _mm256_store_ps(buf, v);
  std::memcpy(p, buf, size_t(n) * sizeof(float));
}
inline Vec broadcast(float x) {
  return _mm256_set1_ps(x);
}
inline Vec mul(Vec a, Vec b) {
  return _mm256_mul_ps(a, b);
}
#else
inline void store(float* p, Vec v) {
  _mm_storeu_ps(p, v);
}
inline void store_part(float* p, Vec v, int n) {
  alignas(16) float buf[4];
  _mm_store_ps(buf, v);
  std::memcpy(p, buf, size_t(n) * sizeof(float));
}
inline Vec broadcast(float x) {
  return _mm_set1_ps(x);
}
inline Vec mul(Vec a, Vec b) {
  return _mm_mul_ps(a, b);
}
#endif

// Loads of L pool elements as f32 lanes (Load::T is the pool's element: float, or the bits of a
// bf16 / f16). The avx2 and avx512 sets have them from the invariant tiles (F16C / AVX-512
// conversions; bf16 by shift); the baseline set widens bf16 by interleaving with zeros and f16
// element by element (x86-64 without F16C has no vector conversion).
using invariant::F32Load;
#if TESSEL_KERNEL_ISA_LEVEL >= 1
using invariant::Bf16Load;
using invariant::F16Load;
#else
struct Bf16Load {
  using T = uint16_t;
  static Vec load(const uint16_t* p) {
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
  }
  static Vec load_part(const uint16_t* p, int n) {
    alignas(16) uint16_t buf[4] = {};
    std::memcpy(buf, p, size_t(n) * sizeof(uint16_t));
    return load(buf);
  }
};
struct F16Load {
  using T = uint16_t;
  static Vec load(const uint16_t* p) { return load_part(p, kL); }
  static Vec load_part(const uint16_t* p, int n) {
    alignas(16) float buf[4] = {};
    for (int i = 0; i < n; ++i) buf[i] = f16_to_float(F16{p[i]});
    return _mm_load_ps(buf);
  }
};
#endif

// Keys per group of dot products: L accumulators are summed in one transposed pass.
constexpr int kGroup = kL;
// Head-dim vectors held in registers while the values are accumulated.
constexpr int kValueVecs = 4;

template <typename Load = F32Load>
inline Vec load_at(const typename Load::T* p, int64_t d, int64_t dim) {
  return d + kL <= dim ? Load::load(p + d) : Load::load_part(p + d, int(dim - d));
}

// Asks for every cache line of row[0, n) into L2 (prefetcht1); nothing for a null row.
template <typename T>
inline void prefetch_row(const T* row, int64_t n) {
  if (row == nullptr) return;
  const uintptr_t end = reinterpret_cast<uintptr_t>(row + n);
  for (uintptr_t at = reinterpret_cast<uintptr_t>(row) & ~uintptr_t(63); at < end; at += 64)
    _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T1);
}

// dots[j] = q . key[j] over dim for the kGroup keys of one group. With pf, the rows pf[j] (null:
// none) are asked for, a share of them per step of the head dim, interleaved with the arithmetic.
template <typename Load>
inline void group_dots(const float* q, const typename Load::T* const* key, int64_t dim, float* dots,
                       const typename Load::T* const* pf) {
  Vec acc[kGroup];
#pragma GCC unroll 16
  for (int j = 0; j < kGroup; ++j) acc[j] = Lanes::zero();
  const int64_t steps = (dim + kL - 1) / kL;
  for (int64_t d = 0, step = 0; d < dim; d += kL, ++step) {
    if (pf != nullptr)
      for (int64_t j = step * kGroup / steps; j < (step + 1) * kGroup / steps; ++j)
        prefetch_row(pf[j], dim);
    const Vec qv = load_at(q, d, dim);
#pragma GCC unroll 16
    for (int j = 0; j < kGroup; ++j) acc[j] = Lanes::fma(qv, load_at<Load>(key[j], d, dim), acc[j]);
  }
  Lanes::sums(acc, kGroup, dots);
}

// s[t] for the tile's kTile keys: scale * q . key[t] for t in [a, b), -inf elsewhere. key[t]
// must be readable (dim elements) for every t of a group that meets [a, b). With pf, the rows
// pf[t] of every group computed are asked for (group_dots).
template <int64_t kTile, typename Load>
void tile_scores(const float* q, const typename Load::T* const* key, int64_t dim, int64_t a,
                 int64_t b, float scale, float* s, const typename Load::T* const* pf) {
  static_assert(kTile % kGroup == 0, "groups sit at fixed offsets of the tile");
  alignas(64) float dots[kTile];
  for (int64_t g = a / kGroup * kGroup; g < b; g += kGroup)
    group_dots<Load>(q, key + g, dim, dots + g, pf ? pf + g : nullptr);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp simd
  for (int64_t t = 0; t < kTile; ++t) s[t] = t >= a && t < b ? dots[t] * scale : kNegInf;
}

// acc[0, dim) = acc * corr + sum over t in [a, b), in order, of p[t] * value[t]. With pf, the
// rows pf[t] for t in [a, b) are asked for, one per key summed.
template <typename Load>
void accumulate_values(float* acc, const float* p, const typename Load::T* const* value,
                       int64_t dim, int64_t a, int64_t b, float corr,
                       const typename Load::T* const* pf) {
  const Vec c = broadcast(corr);
  for (int64_t d0 = 0; d0 < dim; d0 += kValueVecs * kL) {
    const int64_t rest = std::min<int64_t>(dim - d0, kValueVecs * kL);
    const int vecs = int((rest + kL - 1) / kL);
    if (vecs == kValueVecs && rest == kValueVecs * kL) {
      Vec r[kValueVecs];
#pragma GCC unroll 4
      for (int i = 0; i < kValueVecs; ++i) r[i] = mul(Lanes::load(acc + d0 + i * kL), c);
      for (int64_t t = a; t < b; ++t) {
        if (pf != nullptr && d0 == 0) prefetch_row(pf[t], dim);
        const Vec pv = broadcast(p[t]);
        const typename Load::T* v = value[t] + d0;
#pragma GCC unroll 4
        for (int i = 0; i < kValueVecs; ++i) r[i] = Lanes::fma(pv, Load::load(v + i * kL), r[i]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < kValueVecs; ++i) store(acc + d0 + i * kL, r[i]);
    } else {
      // The head dim's last, partial chunk: the same operations per element.
      for (int i = 0; i < vecs; ++i) {
        const int64_t d = d0 + i * kL;
        Vec r = mul(load_at(acc, d, dim), c);
        for (int64_t t = a; t < b; ++t) {
          if (pf != nullptr && d == 0) prefetch_row(pf[t], dim);
          r = Lanes::fma(broadcast(p[t]), load_at<Load>(value[t], d, dim), r);
        }
        store_part(acc + d, r, int(std::min<int64_t>(kL, dim - d)));
      }
    }
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu::paged
