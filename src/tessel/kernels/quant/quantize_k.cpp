// SPDX-License-Identifier: Apache-2.0
// Quantizers for the k-quant rows (Q4_K, Q5_K, Q6_K; layouts in quant_blocks.h). Not ggml's search
// (which weights the error by the magnitude and tries many scales); a simpler one:
// - Q4_K: each 32-weight sub-block starts from its min-max fit x ~ s*q - m (q in 0..15, min
//   capped at 0 so that m >= 0 as the format requires), refined by two least-squares refits of
//   (s, m) to the rounded codes; the eight s and m are then coded in 6 bits against the
//   super-block's f16 d and dmin, and the codes recomputed with the stored scales.
// - Q5_K: the same as Q4_K with codes 0..31.
// - Q6_K: each 16-weight sub-block maps its largest-magnitude weight to code -32 (as Q4_0 does:
//   scale = max / -32), the sixteen scales are coded in 8 bits against the f16 d, and the codes
//   recomputed with the stored scales.
// Gaussian rows reach an NMSE of about 5.5e-3 (Q4_K) and 3.5e-4 (Q6_K)
// (tests/kernels/quant_format_test.cpp, docs/KERNELS.md).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessel/core/dtype.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/quantize.h"

namespace tessel::kernels::quant {

namespace {

int round_clamp(float v, int lo, int hi) {
  return std::clamp(int(std::lround(v)), lo, hi);
}

// A stored f16 scale: the value that the dequantizer will see.
float stored_half(float f, uint16_t& bits) {
  bits = float_to_f16(f).bits;
  return half_bits_to_float(bits);
}

// Fits x ~ scale * q - offset with q in 0..qmax, scale >= 0 and offset >= 0.
void fit_sub_block(const float* x, int qmax, float& scale, float& offset) {
  float lo = 0, hi = x[0];
  for (int l = 0; l < 32; ++l) lo = std::min(lo, x[l]), hi = std::max(hi, x[l]);
  scale = (hi - lo) / float(qmax);
  offset = -lo;
  if (scale <= 0) return;
  for (int iter = 0; iter < 2; ++iter) {
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int l = 0; l < 32; ++l) {
      const double q = round_clamp((x[l] + offset) / scale, 0, qmax);
      sq += q, sqq += q * q, sx += x[l], sqx += q * x[l];
    }
    const double var = 32 * sqq - sq * sq;
    if (var <= 0) return;
    const double a = (32 * sqx - sq * sx) / var;
    const double b = (sx - a * sq) / 32;
    if (!(a > 0) || b > 0) return;  // keep what the format can store
    scale = float(a);
    offset = float(-b);
  }
}

// The shared part of Q4_K and Q5_K: fits the eight sub-blocks, stores d, dmin and the packed
// 6-bit scales and mins, and hands each element's code (0..qmax, with the stored scales) to `set`.
template <class Block, class SetCode>
void quantize_offset_block(const float* x, int qmax, Block& b, SetCode set) {
  float scale[8], offset[8], max_scale = 0, max_offset = 0;
  for (int s = 0; s < 8; ++s) {
    fit_sub_block(x + 32 * s, qmax, scale[s], offset[s]);
    max_scale = std::max(max_scale, scale[s]);
    max_offset = std::max(max_offset, offset[s]);
  }
  const float d = stored_half(max_scale / 63, b.d);
  const float dmin = stored_half(max_offset / 63, b.dmin);
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0 ? round_clamp(scale[s] / d, 0, 63) : 0;
    m[s] = dmin > 0 ? round_clamp(offset[s] / dmin, 0, 63) : 0;
  }
  q4k_pack_scales(sc, m, b.scales);
  for (int s = 0; s < 8; ++s) {
    const float ds = d * float(sc[s]), dm = dmin * float(m[s]);
    for (int l = 0; l < 32; ++l) {
      const int e = 32 * s + l;
      set(b, e, ds > 0 ? round_clamp((x[e] + dm) / ds, 0, qmax) : 0);
    }
  }
}

void quantize_q4_k_block(const float* x, BlockQ4_K& b) {
  quantize_offset_block(x, 15, b, [](BlockQ4_K& blk, int e, int q) {
    uint8_t& byte = blk.qs[32 * (e / 64) + e % 32];
    byte = (e % 64) < 32 ? uint8_t((byte & 0xF0) | q) : uint8_t((byte & 0x0F) | (q << 4));
  });
}

void quantize_q5_k_block(const float* x, BlockQ5_K& b) {
  quantize_offset_block(x, 31, b, q5k_set_code);
}

void quantize_q6_k_block(const float* x, BlockQ6_K& b) {
  float scale[16], max_abs = 0;
  for (int s = 0; s < 16; ++s) {
    float amax = 0, max = 0;
    for (int l = 0; l < 16; ++l)
      if (amax < std::fabs(x[16 * s + l])) amax = std::fabs(x[16 * s + l]), max = x[16 * s + l];
    scale[s] = max / -32;
    max_abs = std::max(max_abs, std::fabs(scale[s]));
  }
  const float d = stored_half(max_abs / 127, b.d);
  for (int s = 0; s < 16; ++s) {
    const int sc = d > 0 ? round_clamp(scale[s] / d, -128, 127) : 0;
    b.scales[s] = int8_t(sc);
    const float ds = d * float(sc);
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * s + l;
      q6k_set_code(b, e, ds != 0 ? round_clamp(x[e] / ds, -32, 31) + 32 : 32);
    }
  }
}

template <class Block, class Fn>
void quantize_k_row(const float* src, void* dst, int64_t k, QuantType type, Fn fn) {
  row_bytes(type, k);  // refuses a k that is not a multiple of 256
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < k / kKBlock; ++i) {
    Block b{};
    fn(src + i * kKBlock, b);
    std::memcpy(out + i * sizeof(Block), &b, sizeof b);
  }
}

}  // namespace

void quantize_row_q4_k(const float* src, void* dst, int64_t k) {
  quantize_k_row<BlockQ4_K>(src, dst, k, QuantType::Q4_K, quantize_q4_k_block);
}

void quantize_row_q5_k(const float* src, void* dst, int64_t k) {
  quantize_k_row<BlockQ5_K>(src, dst, k, QuantType::Q5_K, quantize_q5_k_block);
}

void quantize_row_q6_k(const float* src, void* dst, int64_t k) {
  quantize_k_row<BlockQ6_K>(src, dst, k, QuantType::Q6_K, quantize_q6_k_block);
}

}  // namespace tessel::kernels::quant
