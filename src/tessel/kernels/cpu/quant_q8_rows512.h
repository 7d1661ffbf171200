// SPDX-License-Identifier: Apache-2.0
// Q8_0 decode rows (quant_dot.h's q8_0_rows) on 512-bit vectors, for the avx512 set on a CPU with
// AVX-512 VNNI: two weight rows per register, row 2p's block in the low half and row 2p+1's in
// the high half, against the activation block loaded into both halves. At one activation row the
// 256-bit rows spend per block and row a vpabsb and a vpsignb (to move the weight's sign onto
// the activation), one vpdpbusd, one conversion, one scale permute and one FMA; here each of
// those covers two rows, and the sign moves are gone: the weight codes enter vpdpbusd as the
// unsigned w + 128 (w ^ 0x80) against the signed activation codes, and each lane starts from
// -128 * (the sum of its 4 activation codes), worked out once per block for the four rows, so
// every int32 lane is the exact sum of its four w * x, the 256-bit rows' lanes. The f32 steps
// per lane (conversion, the same f16(d) * d_x product, one FMA per block in block order) and the
// reduction of each row's eight lanes are theirs too: the outputs equal the 256-bit rows' (and
// so the Q8_0 tiles') bit for bit. Kernel-private: include inside TESSEL_ISA_BEGIN, after
// quant_dot.h and quant_fused_rows512.h.
//
// No vector constant here has unequal 64-bit elements (the scale index is put together under
// masks): the GCC 12.2 defect of the avx512 set (docs/KERNELS.md).
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

#if TESSEL_KERNEL_ISA_LEVEL >= 2

// Lanes 0-7 take element a, lanes 8-15 element a + 1.
inline __m512i pair_index(int a) {
  return _mm512_mask_set1_epi32(_mm512_set1_epi32(a), __mmask16(0xFF00), a + 1);
}

// The 32 codes of row r0's block in the low half, row r1's in the high half.
inline __m512i two_blocks(const uint8_t* r0, const uint8_t* r1) {
  return _mm512_maskz_inserti64x4(__mmask8(0xFF), _mm512_castsi256_si512(load256(r0)), load256(r1),
                                  1);
}

// kQ8Rows (4) rows of Q8_0 against one activation row (block g of row r at w + r * st.row +
// g * st.block: plain rows or an interleaved group); only where cpu_features().avx512_vnni holds
// (Dot512Vnni). Each row prefetches decode_ahead_bytes on (the rows kDecodeAheadRows on at the
// same block, or further along the row when those are too far).
inline void q8_0_rows_vnni512(const uint8_t* w, quant::RowStrides st, const int8_t* x,
                              const float* dx, int64_t blocks, float* out) {
  const __m512i bias = _mm512_set1_epi8(char(0x80));
  const __m512i idx01 = pair_index(0), idx23 = pair_index(2);
  const uint8_t* r0 = w + 2;  // the codes; the f16 scale is the 2 bytes before each block
  const uint8_t* r1 = r0 + st.row;
  const uint8_t* r2 = r1 + st.row;
  const uint8_t* r3 = r2 + st.row;
  __m512 acc01 = _mm512_setzero_ps(), acc23 = _mm512_setzero_ps();
  for (int64_t g = 0; g < blocks; ++g) {
    const int64_t o = g * st.block;
    const int64_t ahead = o + decode_ahead_bytes(kDecodeAheadRows, blocks * kQ8Bytes);
    decode_prefetch<kQ8DecodeTo>(r0 + ahead);
    decode_prefetch<kQ8DecodeTo>(r1 + ahead);
    decode_prefetch<kQ8DecodeTo>(r2 + ahead);
    decode_prefetch<kQ8DecodeTo>(r3 + ahead);
    const __m512i xv = load256_twice(x + 32 * g);
    // -128 * (each lane's 4 activation codes summed): exact, |sum| <= 4 * 128 * 128.
    const __m512i start =
        _mm512_sub_epi32(_mm512_setzero_si512(), Dot512Vnni::dot(_mm512_setzero_si512(), bias, xv));
    const __m512 s = _mm512_zextps128_ps512(q8_0_block_scales<4>(w, st, g, dx[g]));
    const __m512i d01 =
        Dot512Vnni::dot(start, _mm512_xor_si512(two_blocks(r0 + o, r1 + o), bias), xv);
    const __m512i d23 =
        Dot512Vnni::dot(start, _mm512_xor_si512(two_blocks(r2 + o, r3 + o), bias), xv);
    acc01 = _mm512_fmadd_ps(to_float(d01), _mm512_maskz_permutexvar_ps(__mmask16(0xFFFF), idx01, s),
                            acc01);
    acc23 = _mm512_fmadd_ps(to_float(d23), _mm512_maskz_permutexvar_ps(__mmask16(0xFFFF), idx23, s),
                            acc23);
  }
  out[0] = hsum(_mm512_maskz_extractf32x8_ps(__mmask8(0xFF), acc01, 0));
  out[1] = hsum(_mm512_maskz_extractf32x8_ps(__mmask8(0xFF), acc01, 1));
  out[2] = hsum(_mm512_maskz_extractf32x8_ps(__mmask8(0xFF), acc23, 0));
  out[3] = hsum(_mm512_maskz_extractf32x8_ps(__mmask8(0xFF), acc23, 1));
}

#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
