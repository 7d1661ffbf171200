// SPDX-License-Identifier: Apache-2.0
// Q4_0's decode step with AMX on: a group of 16 weight rows times 1-3 activation rows in the f32
// order of the AMX tiles (quant_amx.cpp), so that a row has the same bits alone as in a prompt.
// The tiles' order needs, per output and block, the exact integer sum S of (u - 8) x before any
// f32 arithmetic; the vector work is getting the 16 rows' S into the 16 lanes of one register.
//
// A Q4_0 block is 16 bytes of nibbles after its f16 scale: low nibbles codes 0-15, high nibbles
// codes 16-31. The 16 bytes of four rows fill one 512-bit register (row 4q + p in 128-bit lane q
// of register p), the low nibbles go against activation codes 0-15 and the high ones against
// 16-31 (each broadcast to the four lanes), and two vpdpbusd leave each row's S as four int32 in
// its lane; one transpose-add of the four registers (two levels of unpack + add) then puts row j's
// S in lane j. Per block of 16 rows: 16 loads, 12 and/shift, 8 vpdpbusd, 9 for the transpose-add
// and one gather of the 16 scales, where the generic few_rows of quant_amx.cpp took per row a
// 256-bit vpdpbusd and its unpacking, then a transpose-add of 16 registers: about half the
// instructions. The unpacking is shared by the activation rows (up to three per pass; the generic
// one read the group again per row). u x, not (u - 8) x, is what vpdpbusd multiplies (u
// unsigned): 8 x the block's sum of x is taken off after (xbias), which is exact.
#include "tessel/kernels/cpu/quant_amx_q4_0_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

// GCC 12's AVX-512 intrinsics start many results from a self-initialised "undefined" vector, which
// -Wmaybe-uninitialized reports once they are inlined into a function with its own target.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define TESSEL_Q4_ROWS_TARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

namespace tessel::kernels::cpu {

namespace {

constexpr int kCols = 16;  // weight rows per group
constexpr int64_t kBlockBytes = 18;
constexpr int kMaxRows = 3;  // activation rows per pass
// The 16 rows are 16 streams, more than the hardware prefetcher follows: once per kPrefetchEvery
// blocks (72 bytes) a line kPrefetchBytes ahead in each.
constexpr int64_t kPrefetchBytes = 512;
constexpr int64_t kPrefetchEvery = 4;

// Row c's stream goes on in row c of the next groups (16 rows further each), so a short row is
// fetched in the next group, not in row c + 1 of this one, which its own lane reads already: the
// distance from offset `at` of a row to kPrefetchBytes later in its stream. (Addresses past the
// end of W are only prefetched, which never faults.)
inline int64_t prefetch_distance(int64_t at, int64_t row_bytes) {
  const int64_t v = at + kPrefetchBytes;
  return (v / row_bytes) * kCols * row_bytes + v % row_bytes - at;
}

// Within each 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3], then the four totals.
TESSEL_Q4_ROWS_TARGET inline __m512i pairs(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
TESSEL_Q4_ROWS_TARGET inline __m512i quads(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// The 16 bytes at offset o of rows p, 4 + p, 8 + p, 12 + p of the group at w (row_bytes apart),
// one per 128-bit lane.
TESSEL_Q4_ROWS_TARGET inline __m512i four_rows(const uint8_t* w, int64_t row_bytes, int64_t o) {
  auto at = [&](int r) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + o + r * row_bytes));
  };
  __m512i v = _mm512_castsi128_si512(at(0));
  v = _mm512_mask_broadcast_i32x4(v, 0x00F0, at(4));
  v = _mm512_mask_broadcast_i32x4(v, 0x0F00, at(8));
  return _mm512_mask_broadcast_i32x4(v, 0xF000, at(12));
}

// A whole group of 16 rows (row_bytes apart) against kM activation rows.
template <int kM>
TESSEL_Q4_ROWS_TARGET void group_rows(int64_t k, int64_t row_bytes, const int8_t* xq,
                                      const float* dx, const int32_t* xbias, const uint8_t* w,
                                      __mmask16 real, float* y, int64_t ldy) {
  const int64_t blocks = k / 32;
  alignas(64) int32_t offsets[kCols];
  for (int c = 0; c < kCols; ++c) offsets[c] = int32_t(c * row_bytes);
  const __m512i index = _mm512_load_si512(offsets);
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 acc[kM];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t g = 0; g < blocks; ++g) {
    const int64_t at = g * kBlockBytes;
    if (g % kPrefetchEvery == 0) {
      const uintptr_t ahead = uintptr_t(w) + uintptr_t(at + prefetch_distance(at, row_bytes));
      for (int c = 0; c < kCols; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + uintptr_t(c * row_bytes)), _MM_HINT_T0);
    }
    __m512i xlo[kM], xhi[kM];
    for (int i = 0; i < kM; ++i) {
      const int8_t* x = xq + i * k + 32 * g;
      xlo[i] = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
      xhi[i] = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 16)));
    }
    __m512i s[kM][4];
    for (int p = 0; p < 4; ++p) {
      const __m512i v = four_rows(w + p * row_bytes, row_bytes, at + 2);
      const __m512i lo = _mm512_and_si512(v, low);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      for (int i = 0; i < kM; ++i)
        s[i][p] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo[i]), hi,
                                      xhi[i]);
    }
    const __m512i d = _mm512_i32gather_epi32(index, w + at, 1);
    const __m512 sw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
    for (int i = 0; i < kM; ++i) {
      const __m512i sums = _mm512_sub_epi32(quads(pairs(s[i][0], s[i][1]), pairs(s[i][2], s[i][3])),
                                            _mm512_set1_epi32(xbias[i * blocks + g]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                               _mm512_mul_ps(sw, _mm512_set1_ps(dx[i * blocks + g])), acc[i]);
    }
  }
  for (int i = 0; i < kM; ++i) _mm512_mask_storeu_ps(y + i * ldy, real, acc[i]);
}

}  // namespace

void q4_0_amx_few_rows(int64_t m, int64_t k, int64_t row_bytes, const int8_t* xq, const float* dx,
                       const int32_t* xbias, const uint8_t* w, int cols, float* y, int64_t ldy) {
  // A partial group (the matrix's last) runs on a copy of its rows, the last one repeated to 16:
  // the extra lanes are computed and not stored.
  std::vector<uint8_t> padded;
  if (cols < kCols) {
    padded.resize(size_t(kCols * row_bytes));
    for (int c = 0; c < kCols; ++c)
      std::memcpy(padded.data() + c * row_bytes, w + std::min(c, cols - 1) * row_bytes,
                  size_t(row_bytes));
    w = padded.data();
  }
  const __mmask16 real = __mmask16((1u << cols) - 1);
  const int64_t blocks = k / 32;
  for (int64_t i = 0; i < m; i += kMaxRows) {
    const int64_t rows = std::min<int64_t>(kMaxRows, m - i);
    const int8_t* x = xq + i * k;
    const float* d = dx + i * blocks;
    const int32_t* b = xbias + i * blocks;
    float* yi = y + i * ldy;
    if (rows == 3)
      group_rows<3>(k, row_bytes, x, d, b, w, real, yi, ldy);
    else if (rows == 2)
      group_rows<2>(k, row_bytes, x, d, b, w, real, yi, ldy);
    else
      group_rows<1>(k, row_bytes, x, d, b, w, real, yi, ldy);
  }
}

}  // namespace tessel::kernels::cpu
