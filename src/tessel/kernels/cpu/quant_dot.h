// SPDX-License-Identifier: Apache-2.0
// The integer dot products of the quantized matmul: activations rounded to int8 per 32-element
// block (scale max|x| / 127, as ggml's Q8_0), multiplied with int8 weight codes read in place
// (Q8_0 blocks, Int8 rows; the 4- to 6-bit formats unpack theirs in quant_fused.h) 32 codes at a
// time into int32, then scaled in f32 per 16 or 32 weights. Four
// variants: plain loops (baseline set), AVX2 (vpmaddubsw + vpmaddwd), AVX-VNNI (VEX vpdpbusd,
// avx2 and avx512 sets, where the CPU has it) and AVX-512 VNNI (vpdpbusd, avx512 set, where the
// CPU has it); kernel_set.h's QuantDot chooses. Both SIMD variants are unsigned x signed byte
// products, so the weight's sign moves onto the activation (|w| * sign(w) x): |w| <= 128 and
// |x| <= 127 keep vpmaddubsw's pair sums below 2^15. Kernel-private: include inside
// TESSEL_ISA_BEGIN.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

inline constexpr int64_t kActBlock = 32;

inline float load_half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  return _cvtsh_ss(bits);  // F16C: exact, subnormals included
#else
  return quant::half_bits_to_float(bits);
#endif
}

// m rows of k activations as int8 codes and one f32 scale per 32-block.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> d;
};

inline void quantize_activation_row(const float* x, int64_t k, int8_t* q, float* d) {
  for (int64_t b = 0; b < k / kActBlock; ++b) {
    const float* xb = x + b * kActBlock;
    float amax = 0;
    for (int j = 0; j < kActBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    for (int j = 0; j < kActBlock; ++j) q[b * kActBlock + j] = int8_t(std::nearbyint(xb[j] * inv));
    d[b] = amax / 127.0f;
  }
}

// sum over 32-blocks g of dx[g] * (ws[2g] * (w.x over the first 16) + ws[2g+1] * (the next 16)).
// (The SIMD versions take kSplit = false when ws[2g] == ws[2g+1] for every g.)
inline float dot_row_scalar(const int8_t* w, const float* ws, const int8_t* x, const float* dx,
                            int64_t blocks) {
  float acc = 0;
  for (int64_t g = 0; g < blocks; ++g) {
    int32_t lo = 0, hi = 0;
    for (int j = 0; j < 16; ++j) lo += int32_t(w[32 * g + j]) * x[32 * g + j];
    for (int j = 16; j < 32; ++j) hi += int32_t(w[32 * g + j]) * x[32 * g + j];
    acc += dx[g] * (ws[2 * g] * float(lo) + ws[2 * g + 1] * float(hi));
  }
  return acc;
}

// Q8_0 weight rows multiplied where they lie (no decoded row: a block is its f16 scale and 32
// codes, the form the dot product takes already): out[r] = sum over blocks g of
// d_r[g] * dx[g] * (codes . x codes) for `rows` rows row_bytes apart, all against one activation
// row. Plain loops; the SIMD versions below take kQ8Rows rows at a time (each row its own
// accumulator), block g of row r at w + r * st.row + g * st.block: plain rows (four streams of W
// in flight) or a group interleaved four rows at a time (one stream, quant/row_interleave.h).
inline constexpr int kQ8Rows = 4;
inline constexpr int64_t kQ8Bytes = 34;  // sizeof(quant::BlockQ8_0)
// How far ahead the 512-bit decode rows (one activation row, each weight read once) prefetch:
// the rows eight after the ones they read, two groups of four. One group ahead left a 2-vCPU AMD
// EPYC (Zen 5) reading Q8_0 weights from memory at 12 GB/s against a 25 GB/s probe: its memory
// latency outlasts one group's compute (docs/BENCHMARKS.md, "Decode rows prefetched two groups
// ahead"); on the Xeons measured before, a longer distance had made no difference.
inline constexpr int64_t kDecodeAheadRows = 8;
// The distance for a kernel of `rows` rows at a time: a full group's rows prefetch
// kDecodeAheadRows on, a remainder the rows right after it (the end of the task's rows).
constexpr int64_t decode_ahead(int64_t rows) {
  return rows >= 4 ? kDecodeAheadRows : rows;
}
// At most this many bytes ahead, whatever the rows' length: eight rows of a long matrix are more
// than an L1 holds (a 5632-wide Q6_K row is 4.6 KiB, eight 37 KiB against a Zen 4's 32 KiB), and
// lines prefetched that far were evicted before their use. On a Zen 4 EPYC, one thread, 512-bit
// set, weights from memory, three rounds against the uncapped distance: Q4_K 5632 x 2048
// 12.8-15.1 -> 17.0-18.2 GB/s, Q8_0 (interleaved) 4096 x 4096 13.7-15.0 -> 16.3-17.5, Q6_K
// 10.6-11.4 -> 11.9-12.4; GPT-2's rows (eight of them 3.4-6.5 KiB) are below the cap and
// unchanged. A 4 KiB cap measured the same as 8 KiB there, and 8 KiB is where a sequential stream
// of Q4_0 groups stopped waiting on memory on a Zen 5 (kQ4GroupAheadBytes), whose memory is
// faster. docs/BENCHMARKS.md, "Decode prefetch distance capped".
inline constexpr int64_t kDecodeAheadMaxBytes = 8192;
// Bytes from a row's block in use to the block it prefetches: `rows` rows on, capped. A capped
// distance lands further along the same row in the plain layout and further along the group's
// one stream in the interleaved one.
constexpr int64_t decode_ahead_bytes(int64_t rows, int64_t row_bytes) {
  return std::min(rows * row_bytes, kDecodeAheadMaxBytes);
}
// Where a decode row kernel's software prefetch puts the lines it asks for, per format. On a Zen 4
// EPYC (one thread, weights from memory, read probe 17-21 GB/s), Q6_K's rows prefetching into L1
// read at 11-15 GB/s although they compute at 30 GB/s from the caches, as if reading and computing
// did not overlap; into L2 they read at 16-21 (interleaved) and the plain rows went from 7 to
// 15-16. Q8_0 gained less (interleaved 17-22 -> 18-23, plain 8-9 -> 18-21); Q4_K was unchanged
// and Q4_0's groups halved (18-21 -> 10), so those two keep L1; Q5_K, whose high bits are a
// second array as Q6_K's are, gained about 10% in L2 (5632 x 2048 12.5-14.1 -> 14.1-16.5). On a
// Zen 5, Q8_0 and Q6_K into L2 had measured the same as into L1. docs/BENCHMARKS.md, "Decode
// prefetch into L2".
enum class PrefetchTo { L1, L2 };
inline constexpr PrefetchTo kQ8DecodeTo = PrefetchTo::L2;
inline constexpr PrefetchTo kQ6DecodeTo = PrefetchTo::L2;
inline constexpr PrefetchTo kQ5DecodeTo = PrefetchTo::L2;
inline constexpr PrefetchTo kQ4DecodeTo = PrefetchTo::L1;  // Q4_0 and Q4_K
// The Q4_K / Q5_K kernels' (kFive: Q5_K).
constexpr PrefetchTo q4_k_decode_to(bool five) {
  return five ? kQ5DecodeTo : kQ4DecodeTo;
}
template <PrefetchTo kTo>
inline void decode_prefetch(const void* p) {
  if constexpr (kTo == PrefetchTo::L1) {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
  } else {
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
  }
}

inline void q8_0_rows_scalar(const uint8_t* w, int64_t row_bytes, int rows, const int8_t* x,
                             const float* dx, int64_t blocks, float* out) {
  for (int r = 0; r < rows; ++r) {
    float acc = 0;
    for (int64_t g = 0; g < blocks; ++g) {
      const uint8_t* p = w + r * row_bytes + g * kQ8Bytes;
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += int32_t(int8_t(p[2 + j])) * x[32 * g + j];
      acc += load_half(p) * dx[g] * float(s);
    }
    out[r] = acc;
  }
}

#if TESSEL_KERNEL_ISA_LEVEL >= 1
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lanes 0-3 carry the first 16 weights' scale, lanes 4-7 the next 16's (the int32 lanes of both
// products below sum 4 consecutive bytes, in order).
// kSplit: the two halves may differ (Q6_K); otherwise one broadcast does, which is cheaper.
template <bool kSplit>
inline __m256 block_scales(const float* ws, float dx) {
  if constexpr (kSplit)
    return _mm256_mul_ps(_mm256_set_m128(_mm_set1_ps(ws[1]), _mm_set1_ps(ws[0])),
                         _mm256_set1_ps(dx));
  else
    return _mm256_set1_ps(ws[0] * dx);
}

inline __m256i dot32_avx2(const int8_t* w, const int8_t* x) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// AVX-VNNI (VEX vpdpbusd, registers 0-15: "x"), written as an instruction so that no target
// attribute is needed; only where cpu_features().avx_vnni holds. The same sums as dot32_avx2:
// |w| <= 128 and |x| <= 127 keep vpmaddubsw's pair sums below 2^15.
inline __m256i dot32_avxvnni(const int8_t* w, const int8_t* x) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  __m256i acc = _mm256_setzero_si256();
  asm("%{vex%} vpdpbusd %2, %1, %0"
      : "+x"(acc)
      : "x"(_mm256_abs_epi8(wv)), "x"(_mm256_sign_epi8(xv, wv)));
  return acc;
}

template <bool kSplit, __m256i (*kDot)(const int8_t*, const int8_t*) = dot32_avx2>
inline float dot_row_avx2(const int8_t* w, const float* ws, const int8_t* x, const float* dx,
                          int64_t blocks) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 2 <= blocks; g += 2) {  // two chains hide the FMA latency
    const __m256i p0 = kDot(w + 32 * g, x + 32 * g);
    const __m256i p1 = kDot(w + 32 * g + 32, x + 32 * g + 32);
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), block_scales<kSplit>(ws + 2 * g, dx[g]), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), block_scales<kSplit>(ws + 2 * g + 2, dx[g + 1]),
                           acc1);
  }
  if (g < blocks) {
    const __m256i p0 = kDot(w + 32 * g, x + 32 * g);
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), block_scales<kSplit>(ws + 2 * g, dx[g]), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// The rows' f16 scales of block g widened together and times dx (lane r: row r; kRows <= 4):
// one conversion and one product for the rows instead of one each, the same f32 products.
template <int kRows>
inline __m128 q8_0_block_scales(const uint8_t* w, quant::RowStrides st, int64_t g, float dx) {
  __m128i h = _mm_setzero_si128();
  for (int r = 0; r < kRows; ++r) {
    uint16_t bits;
    std::memcpy(&bits, w + r * st.row + g * st.block, 2);
    h = _mm_insert_epi16(h, bits, r);
  }
  return _mm_mul_ps(_mm_cvtph_ps(h), _mm_set1_ps(dx));
}

// The body of the SIMD q8_0_rows for a 32-code dot product DOT (a macro: the VNNI version
// needs the VNNI target on the function that inlines it).
#define TESSEL_Q8_0_ROWS_BODY(DOT)                                                                \
  static_assert(kRows <= 4);                                                                      \
  __m256 acc[kRows];                                                                              \
  __m256i lane[kRows];                                                                            \
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps(), lane[r] = _mm256_set1_epi32(r);   \
  /* decode_ahead(kRows) rows' bytes on (capped): in either layout further along the stream */    \
  const int64_t ahead = decode_ahead_bytes(decode_ahead(kRows), blocks * kQ8Bytes);               \
  for (int64_t g = 0; g < blocks; ++g) {                                                          \
    const __m256 s = _mm256_castps128_ps256(q8_0_block_scales<kRows>(w, st, g, dx[g]));           \
    for (int r = 0; r < kRows; ++r) {                                                             \
      const uint8_t* p = w + r * st.row + g * st.block;                                           \
      decode_prefetch<kQ8DecodeTo>(p + ahead);                                                    \
      const __m256i dot = DOT(reinterpret_cast<const int8_t*>(p + 2), x + 32 * g);                \
      acc[r] =                                                                                    \
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_permutevar8x32_ps(s, lane[r]), acc[r]); \
    }                                                                                             \
  }                                                                                               \
  for (int r = 0; r < kRows; ++r) out[r] = hsum(acc[r]);

template <int kRows>
inline void q8_0_rows_avx2(const uint8_t* w, quant::RowStrides st, const int8_t* x, const float* dx,
                           int64_t blocks, float* out) {
  TESSEL_Q8_0_ROWS_BODY(dot32_avx2)
}

template <int kRows>
inline void q8_0_rows_avxvnni(const uint8_t* w, quant::RowStrides st, const int8_t* x,
                              const float* dx, int64_t blocks, float* out) {
  TESSEL_Q8_0_ROWS_BODY(dot32_avxvnni)
}
#endif

#if TESSEL_KERNEL_ISA_LEVEL >= 2
// AVX-512 VNNI on 256-bit vectors (AVX512_VNNI + VL): one vpdpbusd replaces the vpmaddubsw /
// vpmaddwd pair and cannot saturate. Called only where cpu_features().avx512_vnni holds; the
// target attribute adds VNNI to the set's own instructions for these two functions alone.
#define TESSEL_VNNI_TARGET __attribute__((target("avx512vnni,avx512vl,avx512bw,avx512f,avx2,fma")))
TESSEL_VNNI_TARGET inline __m256i dot32_vnni(const int8_t* w, const int8_t* x) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
}

template <bool kSplit>
TESSEL_VNNI_TARGET inline float dot_row_vnni(const int8_t* w, const float* ws, const int8_t* x,
                                             const float* dx, int64_t blocks) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 2 <= blocks; g += 2) {
    const __m256i p0 = dot32_vnni(w + 32 * g, x + 32 * g);
    const __m256i p1 = dot32_vnni(w + 32 * g + 32, x + 32 * g + 32);
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), block_scales<kSplit>(ws + 2 * g, dx[g]), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), block_scales<kSplit>(ws + 2 * g + 2, dx[g + 1]),
                           acc1);
  }
  if (g < blocks) {
    const __m256i p0 = dot32_vnni(w + 32 * g, x + 32 * g);
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), block_scales<kSplit>(ws + 2 * g, dx[g]), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

template <int kRows>
TESSEL_VNNI_TARGET inline void q8_0_rows_vnni(const uint8_t* w, quant::RowStrides st,
                                              const int8_t* x, const float* dx, int64_t blocks,
                                              float* out) {
  TESSEL_Q8_0_ROWS_BODY(dot32_vnni)
}
#undef TESSEL_VNNI_TARGET
#endif
#if TESSEL_KERNEL_ISA_LEVEL >= 1
#undef TESSEL_Q8_0_ROWS_BODY
#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
