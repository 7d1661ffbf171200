// SPDX-License-Identifier: Apache-2.0
// Scalar dequantization of the GGUF weight formats (dequantize.h), element by element through the
// layout accessors of quant_blocks.h, so that the layout is written down in one place.
#include "tessel/kernels/quant/dequantize.h"

#include <cstring>

#include "tessel/core/error.h"
#include "tessel/kernels/quant/q4_0_groups.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/row_interleave.h"

namespace tessel::kernels::quant {

namespace {

template <class Block>
Block load_block(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof b);  // GGUF data need not be aligned for the f16 fields
  return b;
}

// T is float (ggml's arithmetic) or double (exact).
template <class T>
void dequantize_row_as(QuantType type, const uint8_t* src, T* dst, int64_t k) {
  TESSEL_CHECK(type != QuantType::Q4_0x4,
               "dequantize_row: a q4_0x4 row is spread over its group of four "
               "(q4_0_groups.h): use dequantize_matrix_row (or q4_0_group_row, then q4_0)");
  TESSEL_CHECK(!is_interleaved(type), "dequantize_row: a ", quant_type_name(type),
               " row is spread over its group of four (row_interleave.h): use "
               "dequantize_matrix_row");
  if (type == QuantType::Int8) {
    row_bytes(type, k);  // refuses a negative k
    float d;
    std::memcpy(&d, src, sizeof d);
    const auto* q = reinterpret_cast<const int8_t*>(src + kInt8ScaleBytes);
    for (int64_t i = 0; i < k; ++i) dst[i] = T(d) * T(q[i]);
    return;
  }
  const int64_t blocks = row_bytes(type, k) / block_bytes(type);
  switch (type) {
    case QuantType::F16:
      for (int64_t i = 0; i < k; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = T(half_bits_to_float(bits));
      }
      return;
    case QuantType::BF16:
      for (int64_t i = 0; i < k; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = T(bf16_to_float(BF16{bits}));
      }
      return;
    case QuantType::Q8_0:
      for (int64_t b = 0; b < blocks; ++b) {
        const auto blk = load_block<BlockQ8_0>(src + b * sizeof(BlockQ8_0));
        const T d = T(half_bits_to_float(blk.d));
        for (int j = 0; j < kQBlock; ++j) dst[b * kQBlock + j] = d * T(blk.qs[j]);
      }
      return;
    case QuantType::Q4_0:
      for (int64_t b = 0; b < blocks; ++b) {
        const auto blk = load_block<BlockQ4_0>(src + b * sizeof(BlockQ4_0));
        const T d = T(half_bits_to_float(blk.d));
        for (int j = 0; j < kQBlock / 2; ++j) {
          dst[b * kQBlock + j] = d * T((blk.qs[j] & 0xF) - 8);
          dst[b * kQBlock + j + 16] = d * T((blk.qs[j] >> 4) - 8);
        }
      }
      return;
    case QuantType::Q4_K:
      for (int64_t b = 0; b < blocks; ++b) {
        const auto blk = load_block<BlockQ4_K>(src + b * sizeof(BlockQ4_K));
        const T d = T(half_bits_to_float(blk.d)), dmin = T(half_bits_to_float(blk.dmin));
        for (int s = 0; s < 8; ++s) {
          const T scale = d * T(q4k_scale(blk.scales, s));
          const T offset = dmin * T(q4k_min(blk.scales, s));
          for (int l = 0; l < 32; ++l)
            dst[b * kKBlock + 32 * s + l] = scale * T(q4k_code(blk, 32 * s + l)) - offset;
        }
      }
      return;
    case QuantType::Q5_K:
      for (int64_t b = 0; b < blocks; ++b) {
        const auto blk = load_block<BlockQ5_K>(src + b * sizeof(BlockQ5_K));
        const T d = T(half_bits_to_float(blk.d)), dmin = T(half_bits_to_float(blk.dmin));
        for (int s = 0; s < 8; ++s) {
          const T scale = d * T(q4k_scale(blk.scales, s));
          const T offset = dmin * T(q4k_min(blk.scales, s));
          for (int l = 0; l < 32; ++l)
            dst[b * kKBlock + 32 * s + l] = scale * T(q5k_code(blk, 32 * s + l)) - offset;
        }
      }
      return;
    case QuantType::Q6_K:
      for (int64_t b = 0; b < blocks; ++b) {
        const auto blk = load_block<BlockQ6_K>(src + b * sizeof(BlockQ6_K));
        const T d = T(half_bits_to_float(blk.d));
        for (int e = 0; e < kKBlock; ++e)
          dst[b * kKBlock + e] = d * T(blk.scales[e / 16]) * T(q6k_code(blk, e) - 32);
      }
      return;
    case QuantType::Int8:
    case QuantType::Q4_0x4:
    case QuantType::Q4_Kx4:
    case QuantType::Q5_Kx4:
    case QuantType::Q6_Kx4:
    case QuantType::Q8_0x4:
      break;  // above
  }
  TESSEL_FAIL("dequantize_row: unknown quant type ", uint32_t(type));
}

// Q4_0x4's row gathered block by block from its group into an 18-byte Q4_0 block, then as Q4_0;
// an interleaved k-quant row's blocks read where they lie in their group.
template <class T>
void dequantize_matrix_row_as(QuantType type, const uint8_t* matrix, int64_t n, int64_t k,
                              int64_t row, T* dst) {
  const int64_t rb = row_bytes(type, k);
  TESSEL_CHECK(row >= 0 && row < n, "dequantize_matrix_row: row ", row, " outside [0, ", n, ")");
  if (is_interleaved(type)) {
    const int64_t be = block_elements(type);
    for (int64_t b = 0; b < k / be; ++b)
      dequantize_row_as(plain_form(type), matrix + interleaved_block_offset(type, n, k, row, b),
                        dst + b * be, be);
    return;
  }
  if (type != QuantType::Q4_0x4) return dequantize_row_as(type, matrix + row * rb, dst, k);
  uint8_t block[sizeof(BlockQ4_0)];
  for (int64_t g = 0; g < k / kQBlock; ++g) {
    q4_0_group_block(matrix, n, k, row, g, block);
    dequantize_row_as(QuantType::Q4_0, block, dst + g * kQBlock, kQBlock);
  }
}

}  // namespace

void dequantize_matrix_row(QuantType type, const void* matrix, int64_t n, int64_t k, int64_t row,
                           float* dst) {
  dequantize_matrix_row_as(type, static_cast<const uint8_t*>(matrix), n, k, row, dst);
}

void dequantize_matrix_row(QuantType type, const void* matrix, int64_t n, int64_t k, int64_t row,
                           double* dst) {
  dequantize_matrix_row_as(type, static_cast<const uint8_t*>(matrix), n, k, row, dst);
}

void dequantize_row(QuantType type, const void* src, float* dst, int64_t k) {
  dequantize_row_as(type, static_cast<const uint8_t*>(src), dst, k);
}

void dequantize_row(QuantType type, const void* src, double* dst, int64_t k) {
  dequantize_row_as(type, static_cast<const uint8_t*>(src), dst, k);
}

Tensor dequantize(QuantType type, std::span<const uint8_t> bytes, const Shape& shape) {
  TESSEL_CHECK(shape.ndim() >= 1, "dequantize: ", quant_type_name(type),
               " needs a shape with a row dimension, got ", shape);
  const int64_t k = shape[shape.ndim() - 1];
  const int64_t rb = row_bytes(type, k);
  const int64_t rows = k == 0 ? 0 : shape.numel() / k;
  TESSEL_CHECK(int64_t(bytes.size()) == rows * rb, "dequantize: a ", quant_type_name(type),
               " tensor of shape ", shape, " takes ", rows * rb, " bytes, got ", bytes.size());
  Tensor out = empty(shape, DType::F32);
  float* o = out.data<float>();
  // Row by row of each matrix (the last two dims: Q4_0x4 and the x4 k-quants are regrouped per
  // matrix).
  TESSEL_CHECK((type != QuantType::Q4_0x4 && !is_interleaved(type)) || shape.ndim() >= 2,
               "dequantize: ", quant_type_name(type), " needs a matrix shape, got ", shape);
  const int64_t n = shape.ndim() >= 2 ? shape[shape.ndim() - 2] : rows;
  for (int64_t r0 = 0; n > 0 && r0 < rows; r0 += n)
    for (int64_t r = 0; r < n; ++r)
      dequantize_matrix_row(type, bytes.data() + r0 * rb, n, k, r, o + (r0 + r) * k);
  return out;
}

Tensor quantized_weight(QuantType type, std::span<const uint8_t> bytes, int64_t n, int64_t k) {
  const int64_t rb = row_bytes(type, k);
  TESSEL_CHECK(n >= 0 && int64_t(bytes.size()) == n * rb, "quantized_weight: a ",
               quant_type_name(type), " weight of ", n, " rows of ", k, " takes ", n * rb,
               " bytes, got ", bytes.size());
  Tensor w = empty({n, rb}, DType::I8);
  if (!bytes.empty()) std::memcpy(w.data_ptr(), bytes.data(), bytes.size());
  return w;
}

}  // namespace tessel::kernels::quant
