// SPDX-License-Identifier: Apache-2.0
// The fused k-quant rows of quant_fused_rows.h (Q4_K, Q5_K, Q6_K) on 512-bit vectors, for the
// avx512 kernel set: two 32-weight blocks per instruction. At one activation row the 256-bit
// rows are bound by their per-block instruction count (unpacking, one byte dot product, one
// int32 -> f32 conversion and one FMA per 32 weights and row; docs/BENCHMARKS.md); here each
// unpacking step, dot product, conversion and FMA covers 64 weights, so those counts halve.
// Which two blocks share a vector is chosen so that the result is the 256-bit rows' bit for bit:
// those keep two accumulators per row, one for the even blocks and one for the odd ones (Q4_K /
// Q5_K: sub-blocks 2c and 2c+1; Q6_K: quarters 0, 2 and 1, 3 of each half), and add them at the
// end. The 512-bit rows put the even block in the low half of one accumulator and the odd block
// in the high half, so each half receives the same integer sums, converted and multiplied by the
// same scales in the same order, and the two halves are added and reduced as the 256-bit rows
// add acc0 and acc1. Kernel-private: include inside TESSEL_ISA_BEGIN, after quant_fused_rows.h.
//
// No vector constant here has unequal 64-bit elements (the index of Q6_K's scales is put
// together from uniform constants under masks): the GCC 12.2 defect of the avx512 set
// (docs/KERNELS.md) loads such constants as broadcasts. The build applies that defect's fix to
// the kernel files, and this keeps these kernels right whether or not it does.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

#if TESSEL_KERNEL_ISA_LEVEL >= 2

// ---- byte dot products on 512-bit vectors (same lanes, same exact sums as the 256-bit ones) ----

// AVX-512 VNNI: only where cpu_features().avx512_vnni holds. An instruction rather than the
// intrinsic, as DotVnni (the kernel region does not enable avx512vnni).
struct Dot512Vnni {
  static __m512i dot(__m512i init, __m512i u, __m512i x) {
    asm("vpdpbusd %2, %1, %0" : "+v"(init) : "v"(u), "v"(x));
    return init;
  }
};

// AVX-512 BW: vpmaddubsw + vpmaddwd, for an avx512 CPU without VNNI (or with the dot product
// limited below it).
struct Dot512Bw {
  static __m512i dot(__m512i init, __m512i u, __m512i x) {
    return _mm512_add_epi32(init,
                            _mm512_madd_epi16(_mm512_maddubs_epi16(u, x), _mm512_set1_epi16(1)));
  }
};

// GCC 12's plain forms of some 512-bit intrinsics (cvtepi32_ps, permutexvar_ps, broadcast_i64x4,
// extractf32x8_ps) pass an uninitialised source to their masked builtin, which -Wall reports
// wherever they are inlined; the zero-masking forms under a full mask compile to the same
// unmasked instructions and say nothing.
inline __m512 to_float(__m512i v) {
  return _mm512_maskz_cvtepi32_ps(__mmask16(0xFFFF), v);
}

inline __m512i load512(const void* p) {
  return _mm512_loadu_si512(p);
}

// The 32 bytes at p in both halves.
inline __m512i load256_twice(const void* p) {
  return _mm512_maskz_broadcast_i64x4(__mmask8(0xFF), load256(p));
}

// The low half's 16 words (of 32): a mask for the 16-bit shifts below.
inline constexpr __mmask32 kLowWords = 0x0000FFFFu, kHighWords = 0xFFFF0000u;

// Lanes 0-7 s[0], lanes 8-15 s[1].
inline __m512 two_scales(const float* s) {
  return _mm512_mask_broadcastss_ps(_mm512_set1_ps(s[0]), __mmask16(0xFF00), _mm_load_ss(s + 1));
}

// Lanes 4i..4i+3 take element i (i < 4): Q6_K's four 16-weight scales of two blocks, in the
// order of pair_scales(s), pair_scales(s + 2). Built from uniform constants (see the top).
inline __m512i quad_index() {
  __m512i idx = _mm512_maskz_set1_epi32(__mmask16(0x00F0), 1);
  idx = _mm512_mask_set1_epi32(idx, __mmask16(0x0F00), 2);
  return _mm512_mask_set1_epi32(idx, __mmask16(0xF000), 3);
}

inline __m512 quad_scales(__m512i idx, __m128 s) {
  return _mm512_maskz_permutexvar_ps(__mmask16(0xFFFF), idx, _mm512_zextps128_ps512(s));
}

inline __m512 quad_scales(__m512i idx, const float* s) {
  return quad_scales(idx, _mm_loadu_ps(s));
}

// acc's two halves added, then reduced as the 256-bit rows reduce acc0 + acc1.
inline float hsum_halves(__m512 acc) {
  return hsum(_mm256_add_ps(_mm512_maskz_extractf32x8_ps(__mmask8(0xFF), acc, 0),
                            _mm512_maskz_extractf32x8_ps(__mmask8(0xFF), acc, 1)));
}

// Q5_K's fifth bits for chunk c: bit 2c of each qh byte for the low half (sub-block 2c), bit
// 2c+1 for the high half, one byte mask per chunk (the halves differ, so each is put together
// under a mask, see the top).
inline __m512i fifth_bit_mask(int c) {
  return _mm512_mask_set1_epi8(_mm512_set1_epi8(char(1 << (2 * c))),
                               __mmask64(0xFFFFFFFF00000000ull), char(1 << (2 * c + 1)));
}

// u (nibbles, bit 4 clear) with bit 4 set in the bytes whose qh byte (the 32 bytes of qh in both
// halves) has the chunk's bit: the codes q4_k_rows makes with shifts, in a byte test and a masked
// add (which is an or here).
inline __m512i fifth_bits(__m512i u, __m512i qh, __m512i bits) {
  return _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(qh, bits), u, _mm512_set1_epi8(0x10));
}

// As quant_fused_rows.h's (block b of row r at w + r * st.row + b * st.block).
#define TESSEL_FUSED_ROWS_ARGS                                                                   \
  const uint8_t *w, quant::RowStrides st, const float *sdx, int64_t sdx_stride, const int8_t *x, \
      const int32_t *zx, int64_t blocks, float *out

// The codes of a chunk loaded into both halves (load256_twice): each byte's low nibble in the
// low half, its high nibble in the high half. With kGfni, one GFNI affine transform per byte,
// `matrix` (nibble_matrix) an 8 x 8 bit matrix per 64-bit lane (output bit i = parity(matrix
// byte 7 - i AND input)) that keeps bits 0-3 in the low half and moves bits 4-7 to 0-3 in the
// high half; otherwise the high half shifted down by 4 and both masked, two instructions (matrix
// unread). The same bytes either way. The transform is issued as an instruction so that the set
// needs no -mgfni (kGfni only where cpu_features().gfni: kernel_set.h's quant_nibbles_gfni).
template <bool kGfni>
inline __m512i chunk_nibbles(__m512i v, __m512i matrix) {
  if constexpr (kGfni) {
    __m512i u;
    asm("vgf2p8affineqb $0, %2, %1, %0" : "=v"(u) : "v"(v), "v"(matrix));
    return u;
  } else {
    (void)matrix;
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, kHighWords, v, 4), _mm512_set1_epi8(0xF));
  }
}
// chunk_nibbles' matrix; built from uniform constants under a mask (GCC 12.2's AVX-512 constant
// defect: quant_fused_direct512.h's lane_index).
inline __m512i nibble_matrix() {
  return _mm512_mask_set1_epi64(_mm512_set1_epi64(int64_t(0x0102040800000000)), __mmask8(0xF0),
                                int64_t(0x1020408000000000));
}

// Q4_K / Q5_K (q4_k_rows' layout): the 32 bytes of chunk c in both halves, the high half shifted
// down by 4, masked: sub-block 2c in the low half, 2c+1 in the high one, against the 64
// activation codes of those two blocks. Q5_K's fifth bits (fifth_bits): bit 2c of qh to bit 4 in
// the low half, bit 2c+1 in the high half. kGfni: the nibbles by GFNI (chunk_nibbles).
template <class Dot, bool kFive, int R, bool kGfni = false>
inline void q4_k_rows512(TESSEL_FUSED_ROWS_ARGS) {
  constexpr int64_t kBytes = kFive ? 176 : 144;
  const __m512i matrix = nibble_matrix();
  const __m512i zero = _mm512_setzero_si512();
  const __m512i fifth[4] = {fifth_bit_mask(0), fifth_bit_mask(1), fifth_bit_mask(2),
                            fifth_bit_mask(3)};
  (void)fifth;
  (void)zx;
  const int64_t ahead = R * (blocks / 8) * kBytes;  // the next group's bytes, either layout
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks / 8; ++b) {
    for (int c = 0; c < 4; ++c) {
      const int64_t g = 8 * b + 2 * c;
      const __m512i xx = load512(x + 32 * g);
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * st.row + b * st.block;
        decode_prefetch<q4_k_decode_to(kFive)>(p + 48 * c + ahead);
        const __m512i v = load256_twice(p + (kFive ? 48 : 16) + 32 * c);
        __m512i u = chunk_nibbles<kGfni>(v, matrix);
        if constexpr (kFive) u = fifth_bits(u, load256_twice(p + 16), fifth[c]);
        acc[r] = _mm512_fmadd_ps(to_float(Dot::dot(zero, u, xx)),
                                 two_scales(sdx + r * sdx_stride + g), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum_halves(acc[r]);
}

// Q6_K (q6_k_rows' layout): per half of 128 weights, ql's 64 bytes A, B as one vector and qh's
// 32 bytes H in both halves: quarters 0 | 1 are A | B's low nibbles with H << 4 | H << 2 as bits
// 4-5, quarters 2 | 3 their high nibbles with H | H >> 2. q6_k_codes512: half h of the
// super-block at p as those two vectors of codes (shared by q6_k_rows512 and q6_k_direct512).
struct Q6Codes512 {
  __m512i q01, q23;
};
inline Q6Codes512 q6_k_codes512(const uint8_t* p, int h) {
  const __m512i mask = _mm512_set1_epi8(0xF), top = _mm512_set1_epi8(0x30);
  const __m512i ab = load512(p + 64 * h);
  const __m512i hv = load256_twice(p + 128 + 32 * h);
  const __m512i h01 = _mm512_mask_slli_epi16(_mm512_slli_epi16(hv, 2), kLowWords, hv, 4);
  const __m512i h23 = _mm512_mask_srli_epi16(hv, kHighWords, hv, 2);
  return {_mm512_or_si512(_mm512_and_si512(ab, mask), _mm512_and_si512(h01, top)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ab, 4), mask),
                          _mm512_and_si512(h23, top))};
}

template <class Dot, int R>
inline void q6_k_rows512(TESSEL_FUSED_ROWS_ARGS) {
  const __m512i idx = quad_index();
  const int64_t ahead = R * (blocks / 8) * int64_t(sizeof(quant::BlockQ6_K));
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks / 8; ++b) {
    for (int h = 0; h < 2; ++h) {
      const int64_t g = 8 * b + 4 * h;
      const __m512i x01 = load512(x + 32 * g), x23 = load512(x + 32 * g + 64);
      const __m512i z01 = load512(zx + 8 * g), z23 = load512(zx + 8 * g + 16);
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * st.row + b * st.block;
        const char* next = reinterpret_cast<const char*>(p + ahead + 128 * h);
        decode_prefetch<kQ6DecodeTo>(next);
        decode_prefetch<kQ6DecodeTo>(next + 64);
        const Q6Codes512 u = q6_k_codes512(p, h);
        const float* s = sdx + r * sdx_stride + 2 * g;
        acc[r] = _mm512_fmadd_ps(to_float(Dot::dot(z01, u.q01, x01)), quad_scales(idx, s), acc[r]);
        acc[r] =
            _mm512_fmadd_ps(to_float(Dot::dot(z23, u.q23, x23)), quad_scales(idx, s + 4), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum_halves(acc[r]);
}

#undef TESSEL_FUSED_ROWS_ARGS

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
