// SPDX-License-Identifier: Apache-2.0
// Tile micro-kernels of the CPU flash attention (private to cpu/attention*.cpp): small GEMM-like
// loops over register blocks and a vector exp for the softmax, written with the GCC / Clang vector
// extension instead of intrinsics, so one source builds for every kernel set (kernel_set.h):
// 32-byte vectors in the avx2 and avx512 sets, 16-byte SSE vectors in the baseline set.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace tessel::kernels::TESSEL_KERNEL_ISA::attention_tiles {

// The vector width of the kernel set (isa_region.h). The avx512 set keeps 32-byte vectors: it gains
// the 32 registers of AVX-512 without re-tuning the tile shapes.
#if TESSEL_KERNEL_ISA_LEVEL >= 1
inline constexpr int kVecBytes = 32;
#else
inline constexpr int kVecBytes = 16;
#endif

// Keys per tile and queries per tile, chosen by measurement (docs/KERNELS.md): 64 f32 keys (eight
// AVX vectors per score row) and 48 queries (eight register blocks of six rows) measured best,
// though 24 to 64 queries and 32 to 128 keys were all within a few percent.
template <typename T>
inline constexpr int kKeyTile = int(8 * kVecBytes / sizeof(T));
inline constexpr int kQueryTile = 48;

template <typename T>
inline constexpr T kNegInf = -std::numeric_limits<T>::infinity();

// One vector register of T. Used where the accumulators of a register block must stay in
// registers: the compiler spills plain arrays of them to the stack.
template <typename T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(kVecBytes)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(kVecBytes)));
};
template <typename T>
using Vec = typename VecOf<T>::type;
template <typename T>
inline constexpr int kLanes = int(kVecBytes / sizeof(T));

template <typename T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T>
inline void store(T* p, Vec<T> v) {
  std::memcpy(p, &v, sizeof(v));
}

// exp(x) for softmax arguments (x <= ~0), a vector of floats at a time: Cody-Waite range reduction
// to r in [-ln2/2, ln2/2], the degree-6 Cephes expf polynomial, then 2^n through the exponent bits.
// About 1 ulp; exactly 0 below -87 (and for -inf). Written on vectors because the compiler will
// not if-convert the clamps of a scalar loop (FP compares may trap).
inline Vec<float> exp_softmax(Vec<float> x) {
  typedef int32_t Ints __attribute__((vector_size(kVecBytes)));
  const Vec<float> lo = Vec<float>{} - 87.0f, hi = Vec<float>{} + 88.0f;
  Vec<float> xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  Vec<float> n = (xc * 1.44269504088896341f + kRound) - kRound;
  Vec<float> r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  Vec<float> p = Vec<float>{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  Ints bits = (__builtin_convertvector(n, Ints) + 127) << 23;
  // __builtin_bit_cast, not std::bit_cast: the std template was declared outside the kernel
  // set's target region, and an instance of it returning a 32-byte vector would not use AVX.
  Vec<float> y = p * __builtin_bit_cast(Vec<float>, bits);
  return x < lo ? Vec<float>{} : y;
}

// row[j] = exp(row[j] - shift) for j < kBk (f64 uses the library exp: it only feeds the checks).
template <int kBk>
void exp_row(float* row, float shift) {
  for (int v = 0; v < kBk; v += kLanes<float>) store(row + v, exp_softmax(load(row + v) - shift));
}
template <int kBk>
void exp_row(double* row, double shift) {
  for (int j = 0; j < kBk; ++j) row[j] = std::exp(row[j] - shift);
}

template <typename T, int kBk>
T row_max(const T* row) {
  Vec<T> m = load(row);
  for (int v = kLanes<T>; v < kBk; v += kLanes<T>) {
    Vec<T> x = load(row + v);
    m = m < x ? x : m;
  }
  T out = m[0];
  for (int l = 1; l < kLanes<T>; ++l) out = std::max(out, m[l]);
  return out;
}

template <typename T, int kBk>
T row_sum(const T* row) {
  Vec<T> s = load(row);
  for (int v = kLanes<T>; v < kBk; v += kLanes<T>) s += load(row + v);
  T out = 0;
  for (int l = 0; l < kLanes<T>; ++l) out += s[l];
  return out;
}

// The key bias of one row: `bias` with the keys before `first` (a sliding window's start) and at
// and after `end` (the causal cut) masked; tile-relative indices.
template <typename T, int kBk>
const T* causal_bias(const T* bias, int64_t first, int64_t end, T* row_bias) {
  if (first <= 0 && end >= kBk) return bias;
  for (int j = 0; j < kBk; ++j) row_bias[j] = j >= first && j < end ? bias[j] : kNegInf<T>;
  return row_bias;
}

// row[j] = row[j] * scale + bias[j]: scaled scores with masked keys at -inf.
template <typename T, int kBk>
void scale_bias_row(T* row, T scale, const T* bias) {
  for (int v = 0; v < kBk; v += kLanes<T>) store(row + v, load(row + v) * scale + load(bias + v));
}

// Register blocks of the two products: kBlockRows rows x kBlockVecs vectors of accumulators
// (6 x 2 = 12 of the 16 AVX registers, the shape of the usual AVX2 GEMM micro-kernel), so that
// each loaded vector feeds six FMAs and each broadcast two: 0.67 loads per FMA. Measured against
// 4 x 2, 3 x 4 and 2 x 4 (docs/KERNELS.md).
inline constexpr int kBlockRows = 6;
inline constexpr int kBlockVecs = 2;

// Calls fn(std::integral_constant<int, R>{}, r) for row blocks [r, r + R) covering [0, rows):
// blocks of kBlockRows, then 4, 2 and 1 for the rest.
template <typename Fn>
void for_row_blocks(int rows, Fn&& fn) {
  int r = 0;
  for (; r + kBlockRows <= rows; r += kBlockRows) fn(std::integral_constant<int, kBlockRows>{}, r);
  if (r + 4 <= rows) fn(std::integral_constant<int, 4>{}, r), r += 4;
  if (r + 2 <= rows) fn(std::integral_constant<int, 2>{}, r), r += 2;
  if (r < rows) fn(std::integral_constant<int, 1>{}, r);
}

// s[r][c0 : c0 + kV vectors] = a[r][0:dim] . bt[0:dim][same columns] for kRows rows.
template <typename T, int kBk, int kRows, int kV>
void scores_block(const T* a, int64_t lda, const T* bt, int dim, T* s) {
  constexpr int L = kLanes<T>;
  Vec<T> acc[kRows][kV] = {};
  for (int d = 0; d < dim; ++d) {
    Vec<T> b[kV];
    for (int v = 0; v < kV; ++v) b[v] = load(bt + d * kBk + v * L);
    for (int r = 0; r < kRows; ++r) {
      T x = a[r * lda + d];
      for (int v = 0; v < kV; ++v) acc[r][v] += x * b[v];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kV; ++v) store(s + r * kBk + v * L, acc[r][v]);
}

// s[r][0:kBk] = a[r][0:dim] . bt[0:dim][0:kBk] for r < rows: the score tile Q K^T with K already
// transposed into bt (row stride kBk).
template <typename T, int kBk>
void scores_transposed(const T* a, int64_t lda, int rows, const T* bt, int dim, T* s) {
  constexpr int kCols = kBlockVecs * kLanes<T>;
  static_assert(kBk % kCols == 0, "key tile must be whole register blocks");
  for (int c0 = 0; c0 < kBk; c0 += kCols)
    for_row_blocks(rows, [&](auto block, int r) {
      scores_block<T, kBk, decltype(block)::value, kBlockVecs>(a + r * lda, lda, bt + c0, dim,
                                                               s + r * kBk + c0);
    });
}

// a . b over dim, with independent partial sums so the loop vectorises without reassociation.
template <typename T>
T dot(const T* a, const T* b, int dim) {
  constexpr int kPartials = 8;
  T acc[kPartials] = {};
  int d = 0;
  for (; d + kPartials <= dim; d += kPartials)
    for (int l = 0; l < kPartials; ++l) acc[l] += a[d + l] * b[d + l];
  T sum = 0;
  for (int l = 0; l < kPartials; ++l) sum += acc[l];
  for (; d < dim; ++d) sum += a[d] * b[d];
  return sum;
}

// The same score tile by dot products against k rows (stride ldk) directly: cheaper than
// transposing a key tile when there are only a few query rows (decoding).
template <typename T, int kBk>
void scores_direct(const T* a, int64_t lda, int rows, const T* k, int64_t ldk, int nk, int dim,
                   T* s) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < kBk; ++j)
      s[r * kBk + j] = j < nk ? dot(a + r * lda, k + j * ldk, dim) : T(0);
}

// dst[r][0:dim] = src[r * lds + 0:dim] for r < rows: gathers rows of a [B, T, heads, D] tensor
// (rows heads * D apart, often a multiple of 4 KiB: their cache lines would share a few L1 sets)
// into a dense block.
template <typename T>
void pack_rows(const T* src, int64_t lds, int rows, int dim, T* dst) {
  for (int r = 0; r < rows; ++r) std::memcpy(dst + r * dim, src + r * lds, sizeof(T) * size_t(dim));
}

// bt[d][j] = src[j][d] for j < nk, zero-padded to kBk columns.
template <typename T, int kBk>
void transpose_tile(const T* src, int64_t lds, int nk, int dim, T* bt) {
  for (int d = 0; d < dim; ++d)
    for (int j = 0; j < kBk; ++j) bt[d * kBk + j] = j < nk ? src[j * lds + d] : T(0);
}

// out[r][d0 : d0 + kV vectors] += sum_c w[r*wr + c*wc] * src[c][same columns] for kRows rows at
// once: the kRows x kV accumulators stay in registers and each source vector feeds kRows FMAs.
template <typename T, int kRows, int kV>
void accumulate_block(T* out, int64_t ldo, const T* w, int64_t wr, int64_t wc, int n, const T* src,
                      int64_t lds) {
  constexpr int L = kLanes<T>;
  Vec<T> acc[kRows][kV];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kV; ++v) acc[r][v] = load(out + r * ldo + v * L);
  for (int c = 0; c < n; ++c) {
    Vec<T> x[kV];
    for (int v = 0; v < kV; ++v) x[v] = load(src + c * lds + v * L);
    for (int r = 0; r < kRows; ++r) {
      T wv = w[r * wr + c * wc];
      for (int v = 0; v < kV; ++v) acc[r][v] += wv * x[v];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kV; ++v) store(out + r * ldo + v * L, acc[r][v]);
}

// All rows of one column block of kV vectors starting at column d0.
template <typename T, int kV>
void accumulate_columns(T* out, int64_t ldo, int rows, const T* w, int64_t wr, int64_t wc, int n,
                        const T* src, int64_t lds, int d0) {
  for_row_blocks(rows, [&](auto block, int r) {
    accumulate_block<T, decltype(block)::value, kV>(out + r * ldo + d0, ldo, w + r * wr, wr, wc, n,
                                                    src + d0, lds);
  });
}

// out[r][0:dim] += sum_{c<n} w[r*wr + c*wc] * src[c][0:dim] for r < rows: P V, dS K, P^T dO and
// dS^T Q all have this shape. dim goes in register-sized column blocks, then a scalar tail.
template <typename T>
void accumulate(T* out, int64_t ldo, int rows, const T* w, int64_t wr, int64_t wc, int n,
                const T* src, int64_t lds, int dim) {
  constexpr int L = kLanes<T>;
  int d0 = 0;
  for (; d0 + kBlockVecs * L <= dim; d0 += kBlockVecs * L)
    accumulate_columns<T, kBlockVecs>(out, ldo, rows, w, wr, wc, n, src, lds, d0);
  if (dim - d0 >= L) {
    accumulate_columns<T, 1>(out, ldo, rows, w, wr, wc, n, src, lds, d0);
    d0 += L;
  }
  if (d0 == dim) return;
  for (int r = 0; r < rows; ++r) {
    T* o = out + r * ldo;
    for (int c = 0; c < n; ++c) {
      T x = w[r * wr + c * wc];
      const T* sr = src + c * lds;
      for (int d = d0; d < dim; ++d) o[d] += x * sr[d];
    }
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::attention_tiles
