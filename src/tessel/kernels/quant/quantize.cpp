// SPDX-License-Identifier: Apache-2.0
// Quantizers for F16, BF16, Q8_0, Q4_0 and Int8 rows (quantize.h). Q8_0 and Q4_0 use ggml's
// reference rules, operation for operation in f32, because a GGUF file written here must hold the
// bytes ggml would write for the same weights.
#include "tessel/kernels/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/row_interleave.h"

namespace tessel::kernels::quant {

namespace {

uint16_t float_to_half_bits(float f) {
  return float_to_f16(f).bits;
}

// Q8_0: d = max|x| / 127, q = x / d rounded half away from zero (roundf).
void quantize_q8_0(const float* x, BlockQ8_0& b) {
  float amax = 0;
  for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  b.d = float_to_half_bits(d);
  for (int j = 0; j < kQBlock; ++j) b.qs[j] = int8_t(std::roundf(x[j] * id));
}

// Q4_0: the element of largest magnitude (the first, on ties) maps to code 0, i.e. d = max / -8,
// so its sign picks which end of the asymmetric range [-8, 7] is used; codes are x / d + 8.5
// truncated and capped at 15.
void quantize_q4_0(const float* x, BlockQ4_0& b) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQBlock; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
  const float d = max / -8;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  b.d = float_to_half_bits(d);
  for (int j = 0; j < kQBlock / 2; ++j) {
    const int lo = std::min(15, int(int8_t(x[j] * id + 8.5f)));
    const int hi = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
    b.qs[j] = uint8_t(lo | (hi << 4));
  }
}

// Int8: d = amax / 127 with amax the row's max|x|, q = x / d rounded to nearest (ties away), so
// the largest weight is exactly +-127 * d and the range is symmetric.
void quantize_int8_codes(const float* x, uint8_t* out, int64_t k, float amax) {
  const float d = amax / 127;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  std::memcpy(out, &d, sizeof d);
  auto* q = reinterpret_cast<int8_t*>(out + kInt8ScaleBytes);
  for (int64_t i = 0; i < k; ++i)
    q[i] = int8_t(std::clamp(std::roundf(x[i] * id), -127.0f, 127.0f));
}

void quantize_int8_row(const float* x, uint8_t* out, int64_t k) {
  quantize_int8_codes(x, out, k, int8_row_amax(x, k));
}

template <class Block, class Fn>
void quantize_blocks(const float* src, uint8_t* dst, int64_t k, int block, Fn fn) {
  for (int64_t i = 0; i < k / block; ++i) {
    Block b{};
    fn(src + i * block, b);
    std::memcpy(dst + i * sizeof(Block), &b, sizeof b);
  }
}

}  // namespace

float int8_row_amax(const float* src, int64_t k) {
  float amax = 0;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(src[i]));
  return amax;
}

void quantize_int8_slice(const float* src, void* dst, int64_t k, float amax) {
  TESSEL_CHECK(amax >= int8_row_amax(src, k), "quantize_int8_slice: the row's max|x| ", amax,
               " is below the slice's own ", int8_row_amax(src, k));
  quantize_int8_codes(src, static_cast<uint8_t*>(dst), k, amax);
}

void quantize_row(QuantType type, const float* src, void* dst, int64_t k) {
  row_bytes(type, k);  // refuses a k that is not a multiple of the block
  auto* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case QuantType::F16:
      for (int64_t i = 0; i < k; ++i) {
        const uint16_t bits = float_to_half_bits(src[i]);
        std::memcpy(out + 2 * i, &bits, 2);
      }
      return;
    case QuantType::BF16:
      for (int64_t i = 0; i < k; ++i) {
        const uint16_t bits = float_to_bf16(src[i]).bits;
        std::memcpy(out + 2 * i, &bits, 2);
      }
      return;
    case QuantType::Q8_0:
      quantize_blocks<BlockQ8_0>(src, out, k, kQBlock, quantize_q8_0);
      return;
    case QuantType::Q4_0:
      quantize_blocks<BlockQ4_0>(src, out, k, kQBlock, quantize_q4_0);
      return;
    case QuantType::Q4_K:
      quantize_row_q4_k(src, dst, k);
      return;
    case QuantType::Q5_K:
      quantize_row_q5_k(src, dst, k);
      return;
    case QuantType::Q6_K:
      quantize_row_q6_k(src, dst, k);
      return;
    case QuantType::Int8:
      quantize_int8_row(src, out, k);
      return;
    case QuantType::Q4_0x4:
      TESSEL_FAIL(
          "quantize_row: q4_0x4 is a layout of whole matrices: quantize the rows as q4_0, "
          "then regroup them (q4_0_groups.h)");
    case QuantType::Q4_Kx4:
    case QuantType::Q5_Kx4:
    case QuantType::Q6_Kx4:
    case QuantType::Q8_0x4:
      TESSEL_FAIL("quantize_row: ", quant_type_name(type),
                  " is a layout of whole matrices: quantize the rows as ",
                  quant_type_name(plain_form(type)), ", then interleave them (row_interleave.h)");
  }
  TESSEL_FAIL("quantize_row: unknown quant type ", uint32_t(type));
}

std::vector<uint8_t> quantize_rows(QuantType type, const float* src, int64_t rows, int64_t k) {
  TESSEL_CHECK(rows >= 0, "quantize_rows: negative row count ", rows);
  const int64_t rb = row_bytes(type, k);
  std::vector<uint8_t> out(size_t(rows * rb));
  for (int64_t r = 0; r < rows; ++r) quantize_row(type, src + r * k, out.data() + r * rb, k);
  return out;
}

}  // namespace tessel::kernels::quant
