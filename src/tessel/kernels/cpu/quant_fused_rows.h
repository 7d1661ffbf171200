// SPDX-License-Identifier: Apache-2.0
// The SIMD fused kernels of Q4_K, Q5_K and Q6_K (and Q4_0's rows, plain and regrouped)
// (quant_fused.h has the formats' split and the per-row scales): kRows weight rows per pass against
// one activation row, as Q8_0's rows do (quant_dot.h). Each activation block is loaded once and
// shared by the rows, the rows' loads are independent streams and each row keeps its own two
// accumulators, so the FMA latency of one row's chain no longer bounds the pass (one row at a time
// ran at about half of the read bandwidth, bound by that chain and its per-row work). Per block and
// row what is left: the unpacking, one byte dot product, one conversion and one FMA with the
// block's scale already multiplied by the activation's (`sdx`, worked out per row and activation
// row, 8 at a time). Q6_K's zero point (32 per code, scaled like the codes) is subtracted inside
// the integer sums: the dot products start from `zx`, -32 times the activation codes' sums per 4
// bytes, shared by every row; Q4_K / Q5_K's mins have their own scale and stay in offset_sum. A
// row's operations and their order do not depend on how many rows share the pass, so a row alone
// gives the bits it gives in a group (the matmul's tails use kRows = 1) and in a batch. Below four
// activation rows the k-quant rows take their scales straight from each super-block (kDirect:
// q4_k_direct, q6_k_direct) instead of per-row lists, in the same operations. Kernel-private:
// include inside TESSEL_ISA_BEGIN, after quant_fused.h.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

inline constexpr int kFusedRows = 4;

// -zp * (sum of the four activation codes of each int32 lane) per 32-block: the zero point's
// share of a block's byte dot product, lane by lane (the lanes of every dot below sum 4
// consecutive bytes, in order).
inline void zero_point_lanes(const int8_t* q, int64_t blocks, int32_t zp, int32_t* zx) {
  for (int64_t l = 0; l < 8 * blocks; ++l)
    zx[l] = -zp * (int32_t(q[4 * l]) + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
}

#if TESSEL_KERNEL_ISA_LEVEL >= 1
// scale * dx per block (`per16`: per 16 weights, dx per 32), the factor of each block's sum.
inline void scales_times_dx(const float* sc, bool per16, const float* dx, int64_t blocks,
                            float* sdx) {
  int64_t g = 0;
  if (per16) {
    const __m256i pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    for (; g + 4 <= blocks; g += 4) {
      const __m256 d =
          _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(dx + g)), pairs);
      _mm256_storeu_ps(sdx + 2 * g, _mm256_mul_ps(_mm256_loadu_ps(sc + 2 * g), d));
    }
    for (; g < blocks; ++g) {
      sdx[2 * g] = sc[2 * g] * dx[g];
      sdx[2 * g + 1] = sc[2 * g + 1] * dx[g];
    }
  } else {
    for (; g + 8 <= blocks; g += 8)
      _mm256_storeu_ps(sdx + g, _mm256_mul_ps(_mm256_loadu_ps(sc + g), _mm256_loadu_ps(dx + g)));
    for (; g < blocks; ++g) sdx[g] = sc[g] * dx[g];
  }
}

inline void scales_times_dx(const RowScales& rs, const float* dx, int64_t blocks, float* sdx) {
  scales_times_dx(rs.scale.data(), rs.per16, dx, blocks, sdx);
}

// ---- byte dot products: dot(init, u, x) = init + the eight int32 sums of u * x over 4 bytes ----
// u unsigned (the codes, <= 63), x signed (the activation codes, |x| <= 127).

// vpmaddubsw + vpmaddwd (AVX2): the pair sums stay below 2^15 (2 * 63 * 127), so nothing
// saturates and the sums are exact, as vpdpbusd's are.
struct DotAvx2 {
  static __m256i dot(__m256i init, __m256i u, __m256i x) {
    return _mm256_add_epi32(init,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
  }
};

// AVX-VNNI: the VEX-encoded vpdpbusd on 256-bit vectors (Alder Lake, Zen 5 and later, also
// without AVX-512), registers 0-15 only ("x"). Written as an instruction rather than the
// intrinsic: the intrinsic needs a target attribute on every function it is inlined into, which
// a template shared with DotAvx2 cannot carry. Called only where cpu_features().avx_vnni holds.
struct DotAvxVnni {
  static __m256i dot(__m256i init, __m256i u, __m256i x) {
    asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(init) : "x"(u), "x"(x));
    return init;
  }
};

#if TESSEL_KERNEL_ISA_LEVEL >= 2
// AVX512_VNNI + VL on 256-bit vectors (EVEX, all 32 registers); only where
// cpu_features().avx512_vnni holds.
struct DotVnni {
  static __m256i dot(__m256i init, __m256i u, __m256i x) {
    asm("vpdpbusd %2, %1, %0" : "+v"(init) : "v"(u), "v"(x));
    return init;
  }
};
#endif

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Lanes 0-3 sdx[0], lanes 4-7 sdx[1] (Q6_K's two 16-weight halves of a block).
inline __m256 pair_scales(const float* sdx) {
  const __m128 two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(sdx)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two),
                                  _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

// A Q4_0 block's 32 codes u (0..15) in order from its 16 code bytes: their low nibbles, then
// their high ones.
inline __m256i q4_0_nibbles(const uint8_t* codes) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0xF));
}

// The same from a Q4_0 block (its 2-byte scale, then the codes).
inline __m256i q4_0_codes(const uint8_t* block) {
  return q4_0_nibbles(block + 2);
}

// A Q4_0 output from its two accumulators' sum and its zero-point chains' sum (d * x sums): the
// last step of quant_q4_tiles.h's kernel (the avx512 set without AMX) and of q4_0_rows (the avx2
// set).
inline float q4_0_finish(__m256 acc, float offsets) {
  return std::fma(-8.0f, offsets, hsum(acc));
}

// The fused rows' signature: R rows starting at w, block b of row r at w + r * st.row +
// b * st.block (plain rows or a group interleaved four rows at a time: quant/row_interleave.h);
// row r's scales times dx at sdx + r * sdx_stride; x the activation codes, zx their zero-point
// lanes (Q6_K); out[r] = sum over blocks of sdx * (u . x - zero point share).
#define TESSEL_FUSED_ROWS_ARGS                                                                   \
  const uint8_t *w, quant::RowStrides st, const float *sdx, int64_t sdx_stride, const int8_t *x, \
      const int32_t *zx, int64_t blocks, float *out

// Rows of the avx2 set's Q4_0 kernel at a time (q4_0_rows; a remainder row runs alone, R = 1).
inline constexpr int kQ4Rows = 4;

// Q4_0, the avx2 set's kernel for every m (its 16 vector registers do not hold a tile's
// accumulators: the tiles of quant_q4_tiles.h measured slower there), R weight rows row_bytes
// apart against one activation row: 18-byte blocks, low nibbles the first 16 weights, high
// nibbles the next 16. Each block's f16 scale is read in place and its zero point 8 * d
// subtracted through the activations' block sums, in two chains per row (even blocks, odd blocks)
// of explicit fused multiply-adds: the tiles' operations in their order, so a row has the same
// bits in either kernel, in either set and for any R. The R rows' chains side by side keep more
// multiply-adds in flight than one row's two, each activation block is loaded once for the R
// rows, and the rows after these are prefetched as the blocks go by (without the prefetch four
// interleaved rows read from memory slower than one).
template <class Dot, int R>
inline void q4_0_rows(const uint8_t* w, int64_t row_bytes, const int8_t* x, const float* dx,
                      const float* xs32, int64_t blocks, float* out) {
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc0[R], acc1[R];
  float off0[R], off1[R];
  for (int r = 0; r < R; ++r) {
    acc0[r] = acc1[r] = _mm256_setzero_ps();
    off0[r] = off1[r] = 0;
  }
  auto block = [&](int64_t g, int r, const __m256i xg, __m256& acc, float& off) {
    const uint8_t* b = w + r * row_bytes + 18 * g;
    const float d = load_half(b);
    const __m256 dot = _mm256_cvtepi32_ps(Dot::dot(zero, q4_0_codes(b), xg));
    acc = _mm256_fmadd_ps(dot, _mm256_set1_ps(d * dx[g]), acc);
    off = std::fma(d, xs32[g], off);
  };
  const int64_t ahead = decode_ahead_bytes(decode_ahead(R), row_bytes);
  int64_t g = 0;
  for (; g + 2 <= blocks; g += 2) {
    const __m256i x0 = load256(x + 32 * g), x1 = load256(x + 32 * g + 32);
    for (int r = 0; r < R; ++r) {
      // 36 bytes a pair per row: one line `ahead` on every other pair.
      if (g % 4 == 0) decode_prefetch<kQ4DecodeTo>(w + r * row_bytes + 18 * g + ahead);
      block(g, r, x0, acc0[r], off0[r]);
      block(g + 1, r, x1, acc1[r], off1[r]);
    }
  }
  if (g < blocks) {
    const __m256i x0 = load256(x + 32 * g);
    for (int r = 0; r < R; ++r) block(g, r, x0, acc0[r], off0[r]);
  }
  for (int r = 0; r < R; ++r)
    out[r] = q4_0_finish(_mm256_add_ps(acc0[r], acc1[r]), off0[r] + off1[r]);
}

// Q4_0 regrouped (Q4_0x4, quant/q4_0_groups.h), the avx2 set's kernel for every m: the four rows
// of one group against one activation row, `group` the group's first block (72 bytes a block:
// the four f16 scales, then the rows' 16 code bytes each). Each row's operations are q4_0_rows'
// in their order — the same codes in the same lanes (one 32-byte load holds two rows' codes; a
// lane swap puts each row's low nibbles before its high ones, as q4_0_nibbles does), the same
// scale times dx and zero-point chains (four rows' at once, lane by lane the same IEEE
// operations) — so a regrouped matrix gives the plain one's bits. What it saves per block and
// four rows: two code loads instead of four, the nibbles split two rows at a time, one
// conversion of the four scales instead of four scalar ones, one multiply-add for the four zero
// points; and the matrix is one sequential stream.
template <class Dot>
inline void q4_0_group_rows(const uint8_t* group, const int8_t* x, const float* dx,
                            const float* xs32, int64_t blocks, float* out) {
  const __m256i zero = _mm256_setzero_si256(), low = _mm256_set1_epi8(0xF);
  __m256 acc[2][4];
  __m128 off[2];
  for (int c = 0; c < 2; ++c) {
    off[c] = _mm_setzero_ps();
    for (int r = 0; r < 4; ++r) acc[c][r] = _mm256_setzero_ps();
  }
  auto block = [&](int64_t g, int c, const __m256i xg) {
    const uint8_t* b = group + 72 * g;
    const __m128 d = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
    const __m128 sdx = _mm_mul_ps(d, _mm_set1_ps(dx[g]));
    off[c] = _mm_fmadd_ps(d, _mm_set1_ps(xs32[g]), off[c]);
    for (int pair = 0; pair < 2; ++pair) {
      const __m256i v = load256(b + 8 + 32 * pair);
      const __m256i lo = _mm256_and_si256(v, low);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      const __m256i u[2] = {_mm256_permute2x128_si256(lo, hi, 0x20),
                            _mm256_permute2x128_si256(lo, hi, 0x31)};
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * pair + h;
        const __m256 dot = _mm256_cvtepi32_ps(Dot::dot(zero, u[h], xg));
        const __m256 s =
            _mm256_permutevar8x32_ps(_mm256_castps128_ps256(sdx), _mm256_set1_epi32(r));
        acc[c][r] = _mm256_fmadd_ps(dot, s, acc[c][r]);
      }
    }
  };
  int64_t g = 0;
  for (; g + 2 <= blocks; g += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(group + 72 * g + 1024), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(group + 72 * g + 1088), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(group + 72 * g + 1152), _MM_HINT_T0);
    block(g, 0, load256(x + 32 * g));
    block(g + 1, 1, load256(x + 32 * g + 32));
  }
  if (g < blocks) block(g, 0, load256(x + 32 * g));
  alignas(16) float off0[4], off1[4];
  _mm_store_ps(off0, off[0]);
  _mm_store_ps(off1, off[1]);
  for (int r = 0; r < 4; ++r)
    out[r] = q4_0_finish(_mm256_add_ps(acc[0][r], acc[1][r]), off0[r] + off1[r]);
}

// Q4_K (kFive = false) and Q5_K: bytes 32c..32c+31 of qs hold sub-block 2c in their low nibbles
// and 2c+1 in their high ones; Q5_K's fifth bits for chunk c are bits 2c and 2c+1 of qh[0..31],
// brought to bit 4 of each byte by 16-bit shifts (only bit 4 of each byte is kept, and it comes
// from the same byte).
// With kDirect (the decode step, m < 4: q4_k_direct) each super-block's scales and mins are
// worked out here, where they are used, from the row's 12 scale bytes and the activation row's
// dx and xs32 (k_scales, then the same 8-wide products and multiply-adds as scales_times_dx and
// offset_sum), and the mins come off at the end: the outputs of row_scales -> scales_times_dx ->
// the rows -> offset_sum, bit for bit, without writing the per-row lists to memory first (which
// at m = 1 took about as long as the rows themselves: quant_fused_direct512.h).
template <class Dot, bool kFive, int R, bool kDirect>
inline void q4_k_core(const uint8_t* w, quant::RowStrides st, const float* sdx, int64_t sdx_stride,
                      const float* dx, const float* xs32, const int8_t* x, int64_t blocks,
                      float* out) {
  constexpr int64_t kBytes = kFive ? 176 : 144;
  // decode_ahead(R) rows' bytes ahead (capped), in either layout further along the stream.
  const int64_t ahead = decode_ahead_bytes(decode_ahead(R), (blocks / 8) * kBytes);
  const __m256i mask = _mm256_set1_epi8(0xF), bit4 = _mm256_set1_epi8(0x10);
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc[2][R];
  // The direct rows' mins and scales live in memory, touched once per super-block: in registers
  // they left too few of the sixteen for the eight accumulators, which the compiler then stored
  // on every multiply-add.
  alignas(32) float local[R][8], minacc[R][8];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    acc[0][r] = acc[1][r] = _mm256_setzero_ps();
    if constexpr (kDirect) _mm256_store_ps(minacc[r], _mm256_setzero_ps());
  }
  for (int64_t b = 0; b < blocks / 8; ++b) {
    if constexpr (kDirect)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * st.row + b * st.block;
        const __m128i fields = k_scale_fields(p + 4);
        _mm256_store_ps(local[r], _mm256_mul_ps(widen_fields(fields, load_half(p)),
                                                _mm256_loadu_ps(dx + 8 * b)));
        _mm256_store_ps(minacc[r],
                        _mm256_fmadd_ps(widen_fields(_mm_srli_si128(fields, 8), load_half(p + 2)),
                                        _mm256_loadu_ps(xs32 + 8 * b), _mm256_load_ps(minacc[r])));
      }
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const int64_t g = 8 * b + 2 * c;
      const __m256i xa = load256(x + 32 * g), xb = load256(x + 32 * g + 32);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * st.row + b * st.block;
        decode_prefetch<q4_k_decode_to(kFive)>(p + 48 * c + ahead);
        const __m256i v = load256(p + (kFive ? 48 : 16) + 32 * c);
        __m256i lo = _mm256_and_si256(v, mask),
                hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
        if constexpr (kFive) {
          const __m256i hb = _mm256_srli_epi16(load256(p + 16), 2 * c);
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit4));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit4));
        }
        const float* s = kDirect ? local[r] + 2 * c : sdx + r * sdx_stride + g;
        acc[0][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::dot(zero, lo, xa)),
                                    _mm256_broadcast_ss(s), acc[0][r]);
        acc[1][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::dot(zero, hi, xb)),
                                    _mm256_broadcast_ss(s + 1), acc[1][r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    out[r] = hsum(_mm256_add_ps(acc[0][r], acc[1][r]));
    if constexpr (kDirect) out[r] -= hsum(_mm256_load_ps(minacc[r]));
  }
}

template <class Dot, bool kFive, int R>
inline void q4_k_rows(TESSEL_FUSED_ROWS_ARGS) {
  (void)zx;
  q4_k_core<Dot, kFive, R, false>(w, st, sdx, sdx_stride, nullptr, nullptr, x, blocks, out);
}

// Q6_K: each half of 128 weights reads ql[64h..64h+63] (A, B) and qh[32h..32h+31] (H); quarter
// p takes A's or B's low (p = 0, 1) or high (p = 2, 3) nibbles and bits 2p, 2p+1 of H as bits
// 4-5. Scales per 16 weights (sdx holds two per block).
// kDirect as for q4_k_core: each super-block's sixteen scales from its bytes (q6_k_scales), times
// dx in the pairs scales_times_dx makes.
template <class Dot, int R, bool kDirect>
inline void q6_k_core(const uint8_t* w, quant::RowStrides st, const float* sdx, int64_t sdx_stride,
                      const float* dx, const int8_t* x, const int32_t* zx, int64_t blocks,
                      float* out) {
  const int64_t ahead =
      decode_ahead_bytes(decode_ahead(R), (blocks / 8) * int64_t(sizeof(quant::BlockQ6_K)));
  const __m256i mask = _mm256_set1_epi8(0xF), top = _mm256_set1_epi8(0x30);
  __m256 acc[2][R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
  alignas(32) float local[R][16];
  for (int64_t b = 0; b < blocks / 8; ++b) {
    if constexpr (kDirect)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * st.row + b * st.block;
        alignas(32) float sc[16];
        q6_k_scales(p + 192, load_half(p + 208), sc, nullptr);
        const __m256i pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
        for (int q = 0; q < 2; ++q) {
          const __m256 d = _mm256_permutevar8x32_ps(
              _mm256_castps128_ps256(_mm_loadu_ps(dx + 8 * b + 4 * q)), pairs);
          _mm256_store_ps(local[r] + 8 * q, _mm256_mul_ps(_mm256_load_ps(sc + 8 * q), d));
        }
      }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t g = 8 * b + 4 * h;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * st.row + b * st.block;
        const char* next = reinterpret_cast<const char*>(p + ahead + 128 * h);
        decode_prefetch<kQ6DecodeTo>(next);
        decode_prefetch<kQ6DecodeTo>(next + 64);
        const __m256i a = load256(p + 64 * h), bb = load256(p + 64 * h + 32);
        const __m256i hv = load256(p + 128 + 32 * h);
        const __m256i u[4] = {_mm256_or_si256(_mm256_and_si256(a, mask),
                                              _mm256_and_si256(_mm256_slli_epi16(hv, 4), top)),
                              _mm256_or_si256(_mm256_and_si256(bb, mask),
                                              _mm256_and_si256(_mm256_slli_epi16(hv, 2), top)),
                              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), mask),
                                              _mm256_and_si256(hv, top)),
                              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bb, 4), mask),
                                              _mm256_and_si256(_mm256_srli_epi16(hv, 2), top))};
        const float* s = kDirect ? local[r] + 8 * h : sdx + r * sdx_stride + 2 * g;
        auto quarter = [&](int q, __m256& a) {
          const __m256i d = Dot::dot(load256(zx + 8 * (g + q)), u[q], load256(x + 32 * (g + q)));
          a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), pair_scales(s + 2 * q), a);
        };
        quarter(0, acc[0][r]);
        quarter(1, acc[1][r]);
        quarter(2, acc[0][r]);
        quarter(3, acc[1][r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) out[r] = hsum(_mm256_add_ps(acc[0][r], acc[1][r]));
}

template <class Dot, int R>
inline void q6_k_rows(TESSEL_FUSED_ROWS_ARGS) {
  q6_k_core<Dot, R, false>(w, st, sdx, sdx_stride, nullptr, x, zx, blocks, out);
}

// The decode step's direct rows (m < 4) in the avx2 set: the FusedDirect signature
// (quant_fused_direct512.h: groups of R consecutive rows, a group R rows' bytes long).
template <class Dot, bool kFive, int R>
inline void q4_k_direct(const uint8_t* w, quant::RowStrides st, const int8_t* x, const float* dx,
                        const float* xs32, const int32_t*, int64_t blocks, int64_t groups,
                        float* out) {
  const int64_t group_bytes = R * (blocks / 8) * (kFive ? 176 : 144);
  for (int64_t g = 0; g < groups; ++g)
    q4_k_core<Dot, kFive, R, true>(w + g * group_bytes, st, nullptr, 0, dx, xs32, x, blocks,
                                   out + g * R);
}
template <class Dot, int R>
inline void q6_k_direct(const uint8_t* w, quant::RowStrides st, const int8_t* x, const float* dx,
                        const float*, const int32_t* zx, int64_t blocks, int64_t groups,
                        float* out) {
  const int64_t group_bytes = R * (blocks / 8) * int64_t(sizeof(quant::BlockQ6_K));
  for (int64_t g = 0; g < groups; ++g)
    q6_k_core<Dot, R, true>(w + g * group_bytes, st, nullptr, 0, dx, x, zx, blocks, out + g * R);
}

#undef TESSEL_FUSED_ROWS_ARGS

using FusedRows = void (*)(const uint8_t*, quant::RowStrides, const float*, int64_t, const int8_t*,
                           const int32_t*, int64_t, float*);
#endif

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
