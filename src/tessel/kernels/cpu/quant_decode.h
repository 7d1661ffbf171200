// SPDX-License-Identifier: Apache-2.0
// Decoding one weight row of a GGUF format (quant/quant_blocks.h) for the quantized matmul: the
// codes become signed int8 (Q4_K / Q5_K keep their unsigned codes and a per-32 offset), the
// scales one f32 per 16 weights (the k-quants' finest grain; the 32-weight formats repeat theirs).
// One row is a few KiB and stays in L1 while every activation row is multiplied with it, so a
// matrix is never widened as a whole. The loops are written so that the compiler vectorises them
// with the kernel set's instructions. Kernel-private: include inside TESSEL_ISA_BEGIN.
#pragma once

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

// A weight row in the form the dot products take. `offset` (Q4_K, Q5_K) is subtracted:
// w = scale * q - offset.
struct DecodedRow {
  std::vector<int8_t> q;
  std::vector<float> scale;   // per 16 weights
  std::vector<float> offset;  // per 32 weights
  bool has_offset = false;

  explicit DecodedRow(int64_t k)
      : q(size_t(k)), scale(size_t(k / 16)), offset(size_t(k / 32), 0.0f) {}
};

inline float load_half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  return _cvtsh_ss(bits);  // F16C: exact, subnormals included
#else
  return quant::half_bits_to_float(bits);
#endif
}

#if TESSEL_KERNEL_ISA_LEVEL >= 1
// 16 bytes of nibbles -> 32 codes: the low nibbles first, then the high ones (the order of both
// Q4_0 blocks and Q4_K sub-block pairs), minus `bias`.
inline void unpack_nibbles(const uint8_t* src, int8_t* dst, int bias) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i mask = _mm_set1_epi8(0xF);
  const __m256i codes =
      _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask), _mm_and_si128(bytes, mask));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_sub_epi8(codes, _mm256_set1_epi8(char(bias))));
}
#else
inline void unpack_nibbles(const uint8_t* src, int8_t* dst, int bias) {
  for (int j = 0; j < 16; ++j) {
    dst[j] = int8_t((src[j] & 0xF) - bias);
    dst[j + 16] = int8_t((src[j] >> 4) - bias);
  }
}
#endif

inline void decode_q8_0(const uint8_t* row, int64_t blocks, DecodedRow& out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = row + b * int64_t(sizeof(quant::BlockQ8_0));
    const float d = load_half(p);
    std::memcpy(out.q.data() + 32 * b, p + 2, 32);
    out.scale[size_t(2 * b)] = out.scale[size_t(2 * b + 1)] = d;
  }
}

inline void decode_q4_0(const uint8_t* row, int64_t blocks, DecodedRow& out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = row + b * int64_t(sizeof(quant::BlockQ4_0));
    const float d = load_half(p);
    unpack_nibbles(p + 2, out.q.data() + 32 * b, 8);
    out.scale[size_t(2 * b)] = out.scale[size_t(2 * b + 1)] = d;
  }
}

// The 4-bit part shared by Q4_K and Q5_K: bytes 32c .. 32c+31 of qs hold sub-blocks 2c (low
// nibbles) and 2c+1 (high nibbles): two 16-byte halves, each unpacked as one Q4_0-style run, then
// the runs interleaved back into order.
inline void decode_k_nibbles(const uint8_t* qs, int8_t* q) {
  for (int c = 0; c < 4; ++c) {
    int8_t lo_hi[2][32];
    unpack_nibbles(qs + 32 * c, lo_hi[0], 0);
    unpack_nibbles(qs + 32 * c + 16, lo_hi[1], 0);
    std::memcpy(q + 64 * c, lo_hi[0], 16);
    std::memcpy(q + 64 * c + 16, lo_hi[1], 16);
    std::memcpy(q + 64 * c + 32, lo_hi[0] + 16, 16);
    std::memcpy(q + 64 * c + 48, lo_hi[1] + 16, 16);
  }
}

// Block b's eight 6-bit scale/min pairs (shared by Q4_K and Q5_K), widened to f32.
inline void decode_k_scales(const uint8_t* scales, float d, float dmin, int64_t b,
                            DecodedRow& out) {
  for (int s = 0; s < 8; ++s) {
    const float sc = d * float(quant::q4k_scale(scales, s));
    out.scale[size_t(16 * b + 2 * s)] = out.scale[size_t(16 * b + 2 * s + 1)] = sc;
    out.offset[size_t(8 * b + s)] = dmin * float(quant::q4k_min(scales, s));
  }
}

inline void decode_q4_k(const uint8_t* row, int64_t blocks, DecodedRow& out) {
  out.has_offset = true;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = row + b * int64_t(sizeof(quant::BlockQ4_K));
    const float d = load_half(p), dmin = load_half(p + 2);
    const uint8_t* scales = p + 4;
    const uint8_t* qs = p + 16;
    int8_t* q = out.q.data() + 256 * b;
    decode_k_nibbles(qs, q);
    decode_k_scales(scales, d, dmin, b, out);
  }
}

// Q5_K: Q4_K's nibbles and scales, plus the fifth bit of each code from qh (bit 2c for the first
// 32 of the 64 elements 64c.., bit 2c + 1 for the next 32).
inline void decode_q5_k(const uint8_t* row, int64_t blocks, DecodedRow& out) {
  out.has_offset = true;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = row + b * int64_t(sizeof(quant::BlockQ5_K));
    const float d = load_half(p), dmin = load_half(p + 2);
    const uint8_t* scales = p + 4;
    const uint8_t* qh = p + 16;
    const uint8_t* qs = p + 48;
    int8_t* q = out.q.data() + 256 * b;
    decode_k_nibbles(qs, q);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = int8_t(q[64 * c + l] | (((qh[l] >> (2 * c)) & 1) << 4));
        q[64 * c + 32 + l] = int8_t(q[64 * c + 32 + l] | (((qh[l] >> (2 * c + 1)) & 1) << 4));
      }
    }
    decode_k_scales(scales, d, dmin, b, out);
  }
}

inline void decode_q6_k(const uint8_t* row, int64_t blocks, DecodedRow& out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = row + b * int64_t(sizeof(quant::BlockQ6_K));
    const uint8_t* ql = p;
    const uint8_t* qh = p + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    const float d = load_half(p + 208);
    int8_t* q = out.q.data() + 256 * b;
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const int lo = ql[64 * h + l], hi = ql[64 * h + 32 + l], top = qh[32 * h + l];
        q[128 * h + l] = int8_t(((lo & 0xF) | ((top & 3) << 4)) - 32);
        q[128 * h + 32 + l] = int8_t(((hi & 0xF) | (((top >> 2) & 3) << 4)) - 32);
        q[128 * h + 64 + l] = int8_t(((lo >> 4) | (((top >> 4) & 3) << 4)) - 32);
        q[128 * h + 96 + l] = int8_t(((hi >> 4) | (((top >> 6) & 3) << 4)) - 32);
      }
    for (int s = 0; s < 16; ++s) out.scale[size_t(16 * b + s)] = d * float(sc[s]);
  }
}

inline void decode_row(quant::QuantType type, const uint8_t* row, int64_t k, DecodedRow& out) {
  switch (type) {
    case quant::QuantType::Q8_0:
      return decode_q8_0(row, k / 32, out);
    case quant::QuantType::Q4_0:
      return decode_q4_0(row, k / 32, out);
    case quant::QuantType::Q4_K:
      return decode_q4_k(row, k / 256, out);
    case quant::QuantType::Q5_K:
      return decode_q5_k(row, k / 256, out);
    case quant::QuantType::Q6_K:
      return decode_q6_k(row, k / 256, out);
    default:
      TESSEL_FAIL("quant_matmul: ", quant::quant_type_name(type), " is not an int8 format");
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
