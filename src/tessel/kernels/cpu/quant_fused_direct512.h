// SPDX-License-Identifier: Apache-2.0
// The 512-bit fused k-quant rows for a few activation rows (the decode step, m < 4), with each
// super-block's scales worked out in registers where they are used. The rows of
// quant_fused_rows512.h take per weight row a list of f32 scales (row_scales, k/32 or k/16
// floats) and per activation row those times dx (scales_times_dx), and subtract Q4_K / Q5_K's
// mins afterwards (offset_sum): at m = 1 that preparation, written to memory and read back once,
// took as long as the rows themselves (a profile of the 4096 x 4096 Q4_K product: 4.9% of the
// samples in the preparation against 4.7% in the rows). Here each super-block's 12 (Q4_K, Q5_K)
// or 16 (Q6_K) scale bytes become eight or sixteen f32 scales in a register, are multiplied by
// the eight activation scales of the super-block, and the mins go into one more accumulator per
// row, in the same operations and order as row_scales -> scales_times_dx -> offset_sum, so the
// outputs are those of the 256-bit rows bit for bit. Kernel-private: include inside
// TESSEL_ISA_BEGIN, after quant_fused_rows512.h.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

#if TESSEL_KERNEL_ISA_LEVEL >= 2

// Lane l holds (l >> shift) + add; built from uniform constants under masks (quant_fused_rows512.h
// says why). Once per call.
inline __m512i lane_index(int shift, int add) {
  __m512i idx = _mm512_set1_epi32(add);
  for (int l = 1; l < 16; ++l)
    idx = _mm512_mask_set1_epi32(idx, __mmask16(1u << l), (l >> shift) + add);
  return idx;
}

// w: groups * R consecutive weight rows taken R at a time (a group R rows' bytes long, block b of
// its row r at r * st.row + b * st.block: plain or interleaved, quant/row_interleave.h); x, dx the
// activation row's codes and scales; xs32 dx times its code sums per 32 (Q4_K / Q5_K's mins);
// zx its zero-point lanes (Q6_K); out[j] = row j's output. A call covers a task's rows, not one
// group: the index vectors below are put together once per call (about 80 instructions, an
// eighth of a 768-wide group's time when a call was one group).
#define TESSEL_FUSED_DIRECT_ARGS                                                               \
  const uint8_t *w, quant::RowStrides st, const int8_t *x, const float *dx, const float *xs32, \
      const int32_t *zx, int64_t blocks, int64_t groups, float *out

// _mm512_shuffle_f32x4 in its zero-masking form (quant_fused_rows512.h's to_float says why).
template <int kImm>
inline __m512 shuffle_lanes(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_f32x4(__mmask16(0xFFFF), a, b, kImm);
}

// hsum's last two additions (s0 + s2, s1 + s3, then their sum) in every 128-bit lane at once:
// element 0 of lane r ends with lane r's sum.
inline __m512 lane_sums(__m512 s) {
  s = _mm512_add_ps(s, _mm512_maskz_permute_ps(__mmask16(0xFFFF), s, _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(s, _mm512_maskz_permute_ps(__mmask16(0xFFFF), s, _MM_SHUFFLE(1, 1, 1, 1)));
}

// Four rows' hsum_halves at once (element 0 of 128-bit lane r: row r's), each row's additions
// those of hsum_halves in its order: the halves added lane by lane, then the two 128-bit lanes
// of that sum, then lane_sums. Per row the one-row form took about twenty instructions, a fifth
// of a 768-wide group's time.
inline __m512 hsum_halves4(const __m512 a[4]) {
  const __m512 ab = _mm512_add_ps(shuffle_lanes<_MM_SHUFFLE(1, 0, 1, 0)>(a[0], a[1]),
                                  shuffle_lanes<_MM_SHUFFLE(3, 2, 3, 2)>(a[0], a[1]));
  const __m512 cd = _mm512_add_ps(shuffle_lanes<_MM_SHUFFLE(1, 0, 1, 0)>(a[2], a[3]),
                                  shuffle_lanes<_MM_SHUFFLE(3, 2, 3, 2)>(a[2], a[3]));
  return lane_sums(_mm512_add_ps(shuffle_lanes<_MM_SHUFFLE(2, 0, 2, 0)>(ab, cd),
                                 shuffle_lanes<_MM_SHUFFLE(3, 1, 3, 1)>(ab, cd)));
}

// Four rows' hsum of their high 256 bits, as hsum_halves4 (the two high 128-bit lanes added,
// then lane_sums).
inline __m512 hsum_high4(const __m512 a[4]) {
  const __m512 ab = shuffle_lanes<_MM_SHUFFLE(3, 2, 3, 2)>(a[0], a[1]);
  const __m512 cd = shuffle_lanes<_MM_SHUFFLE(3, 2, 3, 2)>(a[2], a[3]);
  return lane_sums(_mm512_add_ps(shuffle_lanes<_MM_SHUFFLE(2, 0, 2, 0)>(ab, cd),
                                 shuffle_lanes<_MM_SHUFFLE(3, 1, 3, 1)>(ab, cd)));
}

// Element 0 of each 128-bit lane of v to out[0..3].
inline void store_lane_firsts(__m512 v, float* out) {
  _mm_storeu_ps(out, _mm512_maskz_extractf32x4_ps(
                         __mmask8(0xF), _mm512_maskz_compress_ps(__mmask16(0x1111), v), 0));
}

// Q4_K / Q5_K's 12 scale bytes of four weight rows decoded at once, one row per 128-bit lane:
// k_scale_fields' bytes (quant_fused.h), the same operations on a zmm (vpshufd and the masks act
// per lane, masked shifts and ands in place of blends), so four rows cost one decoding.
inline __m512i six_bit_fields4(const uint8_t* p, int64_t row_stride) {
  __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  for (int r = 1; r < 4; ++r)
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * row_stride)),
                           r);
  const __m512i t =
      _mm512_maskz_shuffle_epi32(__mmask16(0xFFFF), v, _MM_PERM_CBCA);  // w0, w2, w1, w2
  const __m512i t2 = _mm512_mask_srli_epi32(t, __mmask16(0x8888), t, 4);
  const __m512i low = _mm512_mask_and_epi32(_mm512_and_si512(t2, _mm512_set1_epi8(0x0F)),
                                            __mmask16(0x5555), t2, _mm512_set1_epi8(0x3F));
  const __m512i top =
      _mm512_and_si512(_mm512_maskz_srli_epi32(__mmask16(0xFFFF), t, 2), _mm512_set1_epi8(0x30));
  return _mm512_mask_or_epi32(low, __mmask16(0xAAAA), low,
                              _mm512_maskz_shuffle_epi32(__mmask16(0xFFFF), top, _MM_PERM_CCAA));
}

// 128-bit lane r of v (r a constant once the row loop is unrolled; spelt out so that it is one
// in any build).
inline __m128i lane128(__m512i v, int r) {
  constexpr __mmask8 kAll = 0xF;
  switch (r) {
    case 0:
      return _mm512_maskz_extracti32x4_epi32(kAll, v, 0);
    case 1:
      return _mm512_maskz_extracti32x4_epi32(kAll, v, 1);
    case 2:
      return _mm512_maskz_extracti32x4_epi32(kAll, v, 2);
    default:
      return _mm512_maskz_extracti32x4_epi32(kAll, v, 3);
  }
}

// Lane l < 8: scale l of the super-block times d; lane 8 + l: min l times dmin. fields: the 16
// bytes k_scale_fields makes (scales, then mins); pair: lane_index(3, 0). The same products as
// k_scales' two `widen`s (an exact conversion, then one multiply by d or dmin), one vector.
inline __m512 scales_and_mins(__m128i fields, const uint8_t* p, __m512i pair) {
  uint32_t dd;
  std::memcpy(&dd, p, 4);
  const __m512 d_dmin = _mm512_maskz_permutexvar_ps(
      __mmask16(0xFFFF), pair, _mm512_zextps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(int(dd)))));
  return _mm512_mul_ps(to_float(_mm512_maskz_cvtepu8_epi32(__mmask16(0xFFFF), fields)), d_dmin);
}

// Q4_K / Q5_K: k_scales' bytes (k_scale_fields, four rows per decoding), widened with d and dmin
// as its `widen` does (scales_and_mins), the scales times dx as scales_times_dx does; the mins
// times xs32 accumulated as offset_sum does (eight at a time, in super-block order, reduced at
// the end) in the high half of a 512-bit accumulator whose low half is discarded. kGfni: the
// nibbles by GFNI (chunk_nibbles, quant_fused_rows512.h; Q5_K's fifth bits are added after).
template <class Dot, bool kFive, int R, bool kGfni = false>
inline void q4_k_direct512(TESSEL_FUSED_DIRECT_ARGS) {
  constexpr int64_t kBytes = kFive ? 176 : 144;
  const __m512i matrix = nibble_matrix();
  const __m512i zero = _mm512_setzero_si512();
  const __m512i fifth[4] = {fifth_bit_mask(0), fifth_bit_mask(1), fifth_bit_mask(2),
                            fifth_bit_mask(3)};
  (void)fifth;
  const __m512i pair[4] = {lane_index(3, 0), lane_index(3, 2), lane_index(3, 4), lane_index(3, 6)};
  (void)zx;
  const int64_t row_bytes = (blocks / 8) * kBytes;
  const int64_t ahead = decode_ahead_bytes(kDecodeAheadRows, row_bytes);
  for (int64_t group = 0; group < groups; ++group, w += R * row_bytes, out += R) {
    __m512 acc[R], mins[R];
    for (int r = 0; r < R; ++r) acc[r] = mins[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks / 8; ++b) {
      const __m256 dx8 = _mm256_loadu_ps(dx + 8 * b);
      // The block sums in the high half, for the mins' lanes.
      const __m512 xs16 =
          _mm512_maskz_broadcast_f32x8(__mmask16(0xFF00), _mm256_loadu_ps(xs32 + 8 * b));
      __m512i fields4 = zero;
      if constexpr (R == 4) fields4 = six_bit_fields4(w + b * st.block + 4, st.row);
      __m512 sdx[R];
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * st.row + b * st.block;
        __m128i fields;
        if constexpr (R == 4) {
          fields = lane128(fields4, r);
        } else {
          fields = k_scale_fields(p + 4);
        }
        const __m512 sm = scales_and_mins(fields, p, pair[0]);
        sdx[r] = _mm512_castps256_ps512(
            _mm256_mul_ps(_mm512_maskz_extractf32x8_ps(__mmask8(0xFF), sm, 0), dx8));
        mins[r] = _mm512_fmadd_ps(sm, xs16, mins[r]);
      }
      for (int c = 0; c < 4; ++c) {
        const __m512i xx = load512(x + 32 * (8 * b + 2 * c));
        for (int r = 0; r < R; ++r) {
          const uint8_t* p = w + r * st.row + b * st.block;
          decode_prefetch<q4_k_decode_to(kFive)>(p + 48 * c + ahead);
          const __m512i v = load256_twice(p + (kFive ? 48 : 16) + 32 * c);
          __m512i u = chunk_nibbles<kGfni>(v, matrix);
          if constexpr (kFive) u = fifth_bits(u, load256_twice(p + 16), fifth[c]);
          const __m512 s2 = _mm512_maskz_permutexvar_ps(__mmask16(0xFFFF), pair[c], sdx[r]);
          acc[r] = _mm512_fmadd_ps(to_float(Dot::dot(zero, u, xx)), s2, acc[r]);
        }
      }
    }
    if constexpr (R == 4) {
      store_lane_firsts(_mm512_sub_ps(hsum_halves4(acc), hsum_high4(mins)), out);
    } else {
      for (int r = 0; r < R; ++r)
        out[r] =
            hsum_halves(acc[r]) - hsum(_mm512_maskz_extractf32x8_ps(__mmask8(0xFF), mins[r], 1));
    }
  }
}

// Q6_K: q6_k_scales' sixteen scales (int8 times d) in one register, times dx per pair of
// 16-weight halves as scales_times_dx does; the zero point stays in the integer sums (zx).
template <class Dot, int R>
inline void q6_k_direct512(TESSEL_FUSED_DIRECT_ARGS) {
  const __m512i twice = lane_index(1, 0);  // dx[l / 2]
  const __m512i quad[4] = {lane_index(2, 0), lane_index(2, 4), lane_index(2, 8), lane_index(2, 12)};
  (void)xs32;
  const int64_t row_bytes = (blocks / 8) * int64_t(sizeof(quant::BlockQ6_K));
  const int64_t ahead = decode_ahead_bytes(kDecodeAheadRows, row_bytes);
  for (int64_t group = 0; group < groups; ++group, w += R * row_bytes, out += R) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks / 8; ++b) {
      const __m512 dx16 = _mm512_maskz_permutexvar_ps(__mmask16(0xFFFF), twice,
                                                      _mm512_maskz_loadu_ps(0x00FF, dx + 8 * b));
      __m512 sdx[R];
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * st.row + b * st.block;
        const __m512i s = _mm512_maskz_cvtepi8_epi32(
            __mmask16(0xFFFF), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)));
        sdx[r] =
            _mm512_mul_ps(_mm512_mul_ps(to_float(s), _mm512_set1_ps(load_half(p + 208))), dx16);
      }
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
          const __m512 s01 = _mm512_maskz_permutexvar_ps(__mmask16(0xFFFF), quad[2 * h], sdx[r]);
          const __m512 s23 =
              _mm512_maskz_permutexvar_ps(__mmask16(0xFFFF), quad[2 * h + 1], sdx[r]);
          acc[r] = _mm512_fmadd_ps(to_float(Dot::dot(z01, u.q01, x01)), s01, acc[r]);
          acc[r] = _mm512_fmadd_ps(to_float(Dot::dot(z23, u.q23, x23)), s23, acc[r]);
        }
      }
    }
    if constexpr (R == 4) {
      store_lane_firsts(hsum_halves4(acc), out);
    } else {
      for (int r = 0; r < R; ++r) out[r] = hsum_halves(acc[r]);
    }
  }
}

#undef TESSEL_FUSED_DIRECT_ARGS

#endif

// The direct kernels' signature (declared in every set: the avx2 set's matmul asks for them and
// gets none).
using FusedDirect = void (*)(const uint8_t*, quant::RowStrides, const int8_t*, const float*,
                             const float*, const int32_t*, int64_t, int64_t, float*);

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
