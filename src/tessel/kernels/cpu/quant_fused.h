// SPDX-License-Identifier: Apache-2.0
// Q4_0, Q4_K, Q5_K and Q6_K weight rows multiplied where they lie: the codes of each 32-weight
// block are unpacked in registers (nibbles masked and shifted, Q5_K's fifth bits and Q6_K's top
// two bits moved into place) and go straight into the integer dot product with the int8
// activations (quant_dot.h), so no decoded row is written and read back. The same split as
// llama.cpp's k-quant dot products against its Q8_K activations (facts of the formats; the code
// is tessel's): the codes stay unsigned (0..15, 0..31, 0..63), the products are unsigned x
// signed bytes (vpdpbusd, or vpmaddubsw + vpmaddwd: 2 * 63 * 127 < 2^15), and the formats' zero
// points (Q4_0's 8, Q6_K's 32, Q4_K / Q5_K's mins) are subtracted once per row through the
// activations' block sums:
//   y = sum_g dx[g] * scale[g] * (u . x)_g  -  sum_t offset[t] * dx * (sum of x codes)_t
// with t over 32-weight blocks (16 for Q6_K, whose scales are per 16). The per-block f32 scales
// and offsets of one weight row (k/32 or k/16 floats, from the f16 / 6-bit fields) are worked out
// once per row and shared by every activation row. Each row is one fixed sequence of operations
// whatever m is, so the product stays batch-invariant. Kernel-private: include inside
// TESSEL_ISA_BEGIN, after quant_dot.h.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

// Per activation row: dx times the sum of the int8 codes, per 32 and per 16 elements.
inline void activation_block_sums(const int8_t* q, const float* d, int64_t k, float* xs32,
                                  float* xs16) {
  for (int64_t g = 0; g < k / kActBlock; ++g) {
    int32_t lo = 0, hi = 0;
    for (int j = 0; j < 16; ++j) lo += q[32 * g + j];
    for (int j = 16; j < 32; ++j) hi += q[32 * g + j];
    xs16[2 * g] = d[g] * float(lo);
    xs16[2 * g + 1] = d[g] * float(hi);
    xs32[g] = d[g] * float(lo + hi);
  }
}

// One weight row's f32 scale and offset per block of its format: w = scale * u - offset with u
// the unsigned code. Per 32 weights, per 16 for Q6_K (`per16`).
struct RowScales {
  std::vector<float> scale, offset;
  bool per16 = false;
};

// Q4_K / Q5_K: the eight 6-bit scales and mins of one super-block (the 12 bytes), times d and
// dmin. Four at a time in 32-bit words: bytes 0-3 hold scales 0-3 in their low 6 bits and the
// top 2 bits of scales 4-7, bytes 4-7 the same for the mins, bytes 8-11 the low 4 bits of
// scale 4-7 (low nibbles) and min 4-7 (high nibbles). The shifts keep every bit in its byte.
inline void k_scales(const uint8_t* s12, float d, float dmin, float* sc, float* off) {
  uint32_t w[3];
  std::memcpy(w, s12, 12);
  const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
  const uint64_t scales = uint64_t(w[0] & m6) | uint64_t((w[2] & m4) | (((w[0] >> 6) & m2) << 4))
                                                    << 32;
  const uint64_t mins =
      uint64_t(w[1] & m6) | uint64_t(((w[2] >> 4) & m4) | (((w[1] >> 6) & m2) << 4)) << 32;
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  auto widen = [](uint64_t bytes, float f, float* out) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(bytes)));
    _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(f)));
  };
  widen(scales, d, sc);
  widen(mins, dmin, off);
#else
  for (int s = 0; s < 8; ++s) {
    sc[s] = d * float((scales >> (8 * s)) & 0xFF);
    off[s] = dmin * float((mins >> (8 * s)) & 0xFF);
  }
#endif
}

// Q6_K: the sixteen int8 scales of one super-block times d; the zero point 32 per code.
inline void q6_k_scales(const uint8_t* s16, float d, float* sc, float* off) {
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s16));
  for (int h = 0; h < 2; ++h) {
    const __m256i i32 = _mm256_cvtepi8_epi32(h ? _mm_srli_si128(v, 8) : v);
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(i32), _mm256_set1_ps(d));
    _mm256_storeu_ps(sc + 8 * h, f);
    _mm256_storeu_ps(off + 8 * h, _mm256_mul_ps(f, _mm256_set1_ps(32.0f)));
  }
#else
  for (int s = 0; s < 16; ++s) {
    sc[s] = d * float(int8_t(s16[s]));
    off[s] = 32.0f * sc[s];
  }
#endif
}

inline void row_scales(quant::QuantType type, const uint8_t* row, int64_t k, RowScales& out) {
  using quant::QuantType;
  out.per16 = type == QuantType::Q6_K;
  // The SIMD Q4_0 row reads its f16 scales in place and subtracts its own zero points: nothing
  // per row (an empty offset list sums to 0).
  const bool in_row = type == QuantType::Q4_0 && TESSEL_KERNEL_ISA_LEVEL >= 1;
  const size_t count = in_row ? 0 : size_t(out.per16 ? k / 16 : k / 32);
  out.scale.resize(count);
  out.offset.resize(count);
  float* sc = out.scale.data();
  float* off = out.offset.data();
  if (in_row) {
  } else if (type == QuantType::Q4_0) {
    for (int64_t g = 0; g < k / 32; ++g) {
      sc[g] = load_half(row + g * int64_t(sizeof(quant::BlockQ4_0)));
      off[g] = 8.0f * sc[g];
    }
  } else if (type == QuantType::Q4_K || type == QuantType::Q5_K) {
    const int64_t bytes =
        type == QuantType::Q4_K ? sizeof(quant::BlockQ4_K) : sizeof(quant::BlockQ5_K);
    for (int64_t b = 0; b < k / 256; ++b) {
      const uint8_t* p = row + b * bytes;
      k_scales(p + 4, load_half(p), load_half(p + 2), sc + 8 * b, off + 8 * b);
    }
  } else if (type == QuantType::Q6_K) {
    for (int64_t b = 0; b < k / 256; ++b) {
      const uint8_t* p = row + b * int64_t(sizeof(quant::BlockQ6_K));
      q6_k_scales(p + 192, load_half(p + 208), sc + 16 * b, off + 16 * b);
    }
  } else {
    TESSEL_FAIL("quant_matmul: ", quant::quant_type_name(type), " is not a fused format");
  }
}

// sum_t offset[t] * xs[t]: the zero points' share of one output.
inline float offset_sum(const RowScales& rs, const float* xs32, const float* xs16) {
  const float* xs = rs.per16 ? xs16 : xs32;
  const float* off = rs.offset.data();
  const size_t n = rs.offset.size();
  size_t t = 0;
  float acc = 0;
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  __m256 v = _mm256_setzero_ps();
  for (; t + 8 <= n; t += 8)
    v = _mm256_fmadd_ps(_mm256_loadu_ps(off + t), _mm256_loadu_ps(xs + t), v);
  acc = hsum(v);
#endif
  for (; t < n; ++t) acc += off[t] * xs[t];
  return acc;
}

// ---- plain loops (baseline set) ----

// The unsigned codes of 32-weight block g of a row.
inline void block_codes_scalar(quant::QuantType type, const uint8_t* row, int64_t g, uint8_t* u) {
  using quant::QuantType;
  if (type == QuantType::Q4_0) {
    const uint8_t* qs = row + g * int64_t(sizeof(quant::BlockQ4_0)) + 2;
    for (int j = 0; j < 16; ++j) {
      u[j] = qs[j] & 0xF;
      u[j + 16] = qs[j] >> 4;
    }
  } else if (type == QuantType::Q4_K || type == QuantType::Q5_K) {
    const bool five = type == QuantType::Q5_K;
    const uint8_t* p = row + (g / 8) * int64_t(five ? 176 : 144);
    const int s = int(g % 8);
    const uint8_t* qs = p + (five ? 48 : 16) + 32 * (s / 2);
    for (int j = 0; j < 32; ++j) {
      u[j] = s % 2 ? qs[j] >> 4 : qs[j] & 0xF;
      if (five) u[j] = uint8_t(u[j] | (((p[16 + j] >> s) & 1) << 4));
    }
  } else {  // Q6_K: quarter p of half h
    const uint8_t* blk = row + (g / 8) * int64_t(sizeof(quant::BlockQ6_K));
    const int h = int(g % 8) / 4, p = int(g % 4);
    const uint8_t* ql = blk + 64 * h + 32 * (p & 1);
    const uint8_t* qh = blk + 128 + 32 * h;
    for (int j = 0; j < 32; ++j)
      u[j] = uint8_t((p < 2 ? ql[j] & 0xF : ql[j] >> 4) | (((qh[j] >> (2 * p)) & 3) << 4));
  }
}

// One output's integer-and-scale part (the caller subtracts offset_sum): the signature of every
// fused row kernel below, `blocks` counting 32-weight blocks.
// xs32: dx times the code sum per 32 activations (used by the rows that subtract their own zero
// points).
using FusedRow = float (*)(const uint8_t* row, const float* scale, const int8_t* x, const float* dx,
                           const float* xs32, int64_t blocks);

template <quant::QuantType kType>
inline float fused_row_scalar(const uint8_t* row, const float* scale, const int8_t* x,
                              const float* dx, const float* /*xs32*/, int64_t blocks) {
  float acc = 0;
  uint8_t u[32];
  for (int64_t g = 0; g < blocks; ++g) {
    block_codes_scalar(kType, row, g, u);
    int32_t lo = 0, hi = 0;
    for (int j = 0; j < 16; ++j) lo += int32_t(u[j]) * x[32 * g + j];
    for (int j = 16; j < 32; ++j) hi += int32_t(u[j]) * x[32 * g + j];
    if constexpr (kType == quant::QuantType::Q6_K)
      acc += dx[g] * (scale[2 * g] * float(lo) + scale[2 * g + 1] * float(hi));
    else
      acc += dx[g] * scale[g] * float(lo + hi);
  }
  return acc;
}

#if TESSEL_KERNEL_ISA_LEVEL >= 1
// ---- SIMD: 32 unsigned codes per __m256i, Dot::dot(codes, x) -> eight int32 partial sums ----

// vpmaddubsw + vpmaddwd (AVX2): codes <= 63 and |x| <= 127 keep the pair sums below 2^15.
struct DotAvx2 {
  static __m256i dot(__m256i u, const int8_t* x) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), _mm256_set1_epi16(1));
  }
};

#if TESSEL_KERNEL_ISA_LEVEL >= 2
// AVX512_VNNI on 256-bit vectors: one vpdpbusd per block. Written as an instruction rather than
// the intrinsic: the intrinsic needs a VNNI target attribute on every function it is inlined into,
// which a template shared with the AVX2 variant cannot carry. Called only where
// cpu_features().avx512_vnni holds.
struct DotVnni {
  static __m256i dot(__m256i u, const int8_t* x) {
    __m256i acc = _mm256_setzero_si256();
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const __m256i_u*>(x)));
    return acc;
  }
};
#endif

// acc += float(dot) * (scale * dx), the scale per 32 weights, or per 16 (lanes 0-3 the first 16
// weights' partial sums, lanes 4-7 the next 16's).
template <bool kPer16>
inline __m256 scale_block(__m256 acc, __m256i dot, const float* scale, float dx) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), block_scales<kPer16>(scale, dx), acc);
}

// Q4_0: 18-byte blocks, low nibbles the first 16 weights, high nibbles the next 16. Its one f16
// scale per block is read in place (no per-row work: rows of 4096 spent a third of their time
// widening scales into the row's list) and its zero point 8 * d subtracted here, in two chains.
template <class Dot>
inline float q4_0_row(const uint8_t* w, const float*, const int8_t* x, const float* dx,
                      const float* xs32, int64_t blocks) {
  const __m256i mask = _mm256_set1_epi8(0xF);
  auto codes = [&](int64_t g) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18 * g + 2));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), mask);
  };
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float off0 = 0, off1 = 0;
  int64_t g = 0;
  for (; g + 2 <= blocks; g += 2) {  // two chains hide the FMA latency
    const float d0 = load_half(w + 18 * g), d1 = load_half(w + 18 * g + 18);
    acc0 = scale_block<false>(acc0, Dot::dot(codes(g), x + 32 * g), &d0, dx[g]);
    acc1 = scale_block<false>(acc1, Dot::dot(codes(g + 1), x + 32 * g + 32), &d1, dx[g + 1]);
    off0 += d0 * xs32[g];
    off1 += d1 * xs32[g + 1];
  }
  if (g < blocks) {
    const float d0 = load_half(w + 18 * g);
    acc0 = scale_block<false>(acc0, Dot::dot(codes(g), x + 32 * g), &d0, dx[g]);
    off0 += d0 * xs32[g];
  }
  return hsum(_mm256_add_ps(acc0, acc1)) - 8.0f * (off0 + off1);
}

// Q4_K (kFive = false) and Q5_K: bytes 32c..32c+31 of qs hold sub-block 2c in their low nibbles
// and 2c+1 in their high ones; Q5_K's fifth bits for chunk c are bits 2c and 2c+1 of qh[0..31],
// brought to bit 4 of each byte by 16-bit shifts (a bit never crosses into the next byte: the
// shifts are < 8 and only bit 4 is kept).
template <class Dot, bool kFive>
inline float q4_k_row(const uint8_t* w, const float* scale, const int8_t* x, const float* dx,
                      const float*, int64_t blocks) {
  const int64_t superblocks = blocks / 8;
  constexpr int64_t kBytes = kFive ? 176 : 144;
  const __m256i mask = _mm256_set1_epi8(0xF), bit4 = _mm256_set1_epi8(0x10);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < superblocks; ++b) {
    const uint8_t* p = w + b * kBytes;
    const uint8_t* qs = p + (kFive ? 48 : 16);
    __m256i hb = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16))
                       : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
      if constexpr (kFive) {
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit4));
        hb = _mm256_srli_epi16(hb, 2);
      }
      const int64_t g = 8 * b + 2 * c;
      acc0 = scale_block<false>(acc0, Dot::dot(lo, x + 32 * g), scale + g, dx[g]);
      acc1 = scale_block<false>(acc1, Dot::dot(hi, x + 32 * g + 32), scale + g + 1, dx[g + 1]);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// Q6_K: each half of 128 weights reads ql[64h..64h+63] (A, B) and qh[32h..32h+31] (H); quarter
// p takes A's or B's low (p = 0, 1) or high (p = 2, 3) nibbles and bits 2p, 2p+1 of H as bits
// 4-5. Scales per 16 weights.
template <class Dot>
inline float q6_k_row(const uint8_t* w, const float* scale, const int8_t* x, const float* dx,
                      const float*, int64_t blocks) {
  const int64_t superblocks = blocks / 8;
  const __m256i mask = _mm256_set1_epi8(0xF), top = _mm256_set1_epi8(0x30);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < superblocks; ++b) {
    const uint8_t* p = w + b * int64_t(sizeof(quant::BlockQ6_K));
    for (int h = 0; h < 2; ++h) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * h));
      const __m256i bb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * h + 32));
      const __m256i hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h));
      const __m256i u0 = _mm256_or_si256(_mm256_and_si256(a, mask),
                                         _mm256_and_si256(_mm256_slli_epi16(hv, 4), top));
      const __m256i u1 = _mm256_or_si256(_mm256_and_si256(bb, mask),
                                         _mm256_and_si256(_mm256_slli_epi16(hv, 2), top));
      const __m256i u2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), mask),
                                         _mm256_and_si256(hv, top));
      const __m256i u3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bb, 4), mask),
                                         _mm256_and_si256(_mm256_srli_epi16(hv, 2), top));
      const int64_t g = 8 * b + 4 * h;
      acc0 = scale_block<true>(acc0, Dot::dot(u0, x + 32 * g), scale + 2 * g, dx[g]);
      acc1 = scale_block<true>(acc1, Dot::dot(u1, x + 32 * g + 32), scale + 2 * g + 2, dx[g + 1]);
      acc0 = scale_block<true>(acc0, Dot::dot(u2, x + 32 * g + 64), scale + 2 * g + 4, dx[g + 2]);
      acc1 = scale_block<true>(acc1, Dot::dot(u3, x + 32 * g + 96), scale + 2 * g + 6, dx[g + 3]);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
