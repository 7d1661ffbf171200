// SPDX-License-Identifier: Apache-2.0
// Q4_0, Q4_K, Q5_K and Q6_K weight rows multiplied where they lie: the codes of each 32-weight
// block are unpacked in registers (nibbles masked and shifted, Q5_K's fifth bits and Q6_K's top
// two bits moved into place) and go straight into the integer dot product with the int8
// activations (quant_dot.h), so no decoded row is written and read back. This file holds the
// per-row scale work and the plain loops (baseline set); the SIMD kernels, several weight rows
// per pass, are in quant_fused_rows.h. The same split as
// llama.cpp's k-quant dot products against its Q8_K activations (facts of the formats; the code
// is tessel's): the codes stay unsigned (0..15, 0..31, 0..63), the products are unsigned x
// signed bytes (vpdpbusd, or vpmaddubsw + vpmaddwd: 2 * 63 * 127 < 2^15), and the formats' zero
// points (Q4_0's 8, Q6_K's 32, Q4_K / Q5_K's mins) are subtracted through the activations'
// block sums (the SIMD rows fold Q6_K's into the integer sums instead):
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
#if TESSEL_KERNEL_ISA_LEVEL >= 1
// The 12 bytes at p (words w0, w1, w2) as the 32-bit lanes scales 0-3, scales 4-7, mins 0-3,
// mins 4-7, one per byte, with vector shuffles and blends (a dozen instructions: the same
// bytes in general-purpose registers took as many per super-block as the decode rows' dot
// products). Reads 16 bytes at p (a super-block continues past its scales).
inline __m128i k_scale_fields(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i t = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));   // w0, w2, w1, w2
  const __m128i t2 = _mm_blend_epi32(t, _mm_srli_epi32(t, 4), 0x8);  // ..., w2 >> 4
  const __m128i low = _mm_blend_epi32(_mm_and_si128(t2, _mm_set1_epi8(0x0F)),
                                      _mm_and_si128(t2, _mm_set1_epi8(0x3F)), 0x5);
  const __m128i top = _mm_and_si128(_mm_srli_epi32(t, 2), _mm_set1_epi8(0x30));
  return _mm_blend_epi32(low, _mm_or_si128(low, _mm_shuffle_epi32(top, _MM_SHUFFLE(2, 2, 0, 0))),
                         0xA);
}

// The low eight bytes of fields as f32, times f (an exact conversion, then one multiply).
inline __m256 widen_fields(__m128i fields, float f) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(fields)), _mm256_set1_ps(f));
}
#endif

// Those bytes times d (sc, the scales) and dmin (off, the mins). The SIMD sets read s12 16
// bytes wide.
inline void k_scales(const uint8_t* s12, float d, float dmin, float* sc, float* off) {
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  const __m128i fields = k_scale_fields(s12);
  _mm256_storeu_ps(sc, widen_fields(fields, d));
  _mm256_storeu_ps(off, widen_fields(_mm_srli_si128(fields, 8), dmin));
#else
  uint32_t w[3];
  std::memcpy(w, s12, 12);
  const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
  const uint64_t scales = uint64_t(w[0] & m6) | uint64_t((w[2] & m4) | (((w[0] >> 6) & m2) << 4))
                                                    << 32;
  const uint64_t mins =
      uint64_t(w[1] & m6) | uint64_t(((w[2] >> 4) & m4) | (((w[1] >> 6) & m2) << 4)) << 32;
  for (int s = 0; s < 8; ++s) {
    sc[s] = d * float((scales >> (8 * s)) & 0xFF);
    off[s] = dmin * float((mins >> (8 * s)) & 0xFF);
  }
#endif
}

// Q6_K: the sixteen int8 scales of one super-block times d; the zero point 32 per code (`off`
// null: not wanted).
inline void q6_k_scales(const uint8_t* s16, float d, float* sc, float* off) {
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s16));
  for (int h = 0; h < 2; ++h) {
    const __m256i i32 = _mm256_cvtepi8_epi32(h ? _mm_srli_si128(v, 8) : v);
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(i32), _mm256_set1_ps(d));
    _mm256_storeu_ps(sc + 8 * h, f);
    if (off) _mm256_storeu_ps(off + 8 * h, _mm256_mul_ps(f, _mm256_set1_ps(32.0f)));
  }
#else
  for (int s = 0; s < 16; ++s) {
    sc[s] = d * float(int8_t(s16[s]));
    if (off) off[s] = 32.0f * sc[s];
  }
#endif
}

// A row's f32 block scales (and Q4_0 / Q4_K / Q5_K's offsets). block_stride: bytes from one
// super-block of the row to the next, when the row's blocks are interleaved with other rows'
// (quant/row_interleave.h); 0 for a plain row.
inline void row_scales(quant::QuantType type, const uint8_t* row, int64_t k, RowScales& out,
                       int64_t block_stride = 0) {
  using quant::QuantType;
  out.per16 = type == QuantType::Q6_K;
  // The SIMD rows (quant_fused_rows.h) subtract Q6_K's zero points inside the integer sums: no
  // offsets for it (an empty offset list sums to 0). The SIMD sets read Q4_0's scales in place.
  const bool folded = TESSEL_KERNEL_ISA_LEVEL >= 1 && type == QuantType::Q6_K;
  const size_t count = size_t(out.per16 ? k / 16 : k / 32);
  out.scale.resize(count);
  out.offset.resize(folded ? 0 : count);
  float* sc = out.scale.data();
  float* off = folded ? nullptr : out.offset.data();
  if (type == QuantType::Q4_0) {
    int64_t g = 0;
    for (; g < k / 32; ++g) {
      sc[g] = load_half(row + g * int64_t(sizeof(quant::BlockQ4_0)));
      if (off) off[g] = 8.0f * sc[g];
    }
  } else if (type == QuantType::Q4_K || type == QuantType::Q5_K) {
    const int64_t bytes = block_stride > 0          ? block_stride
                          : type == QuantType::Q4_K ? int64_t(sizeof(quant::BlockQ4_K))
                                                    : int64_t(sizeof(quant::BlockQ5_K));
    for (int64_t b = 0; b < k / 256; ++b) {
      const uint8_t* p = row + b * bytes;
      k_scales(p + 4, load_half(p), load_half(p + 2), sc + 8 * b, off + 8 * b);
    }
  } else if (type == QuantType::Q6_K) {
    for (int64_t b = 0; b < k / 256; ++b) {
      const uint8_t* p =
          row + b * (block_stride > 0 ? block_stride : int64_t(sizeof(quant::BlockQ6_K)));
      q6_k_scales(p + 192, load_half(p + 208), sc + 16 * b, off ? off + 16 * b : nullptr);
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

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
