// SPDX-License-Identifier: Apache-2.0
// Weight formats of GGUF files (ggml's block quantization: Q8_0 and Q4_0 of the original ggml,
// Q4_K, Q5_K and Q6_K of the k-quants, and F16 / BF16 rows), identified by their ggml type ids,
// and tessel's own Int8 rows for weight-only int8 inference of float models. A quantized matrix
// is stored row by row; each row of k weights is k / block_elements blocks laid out exactly as
// ggml writes them, so GGUF tensor bytes are used as they are (the exceptions, Q4_0x4 and the x4
// forms of the k-quants and Q8_0, are regroupings the CPU backend asks for when a model is
// prepared for inference). The byte layouts are in quant_blocks.h, the scalar (de)quantizers in
// quantize.h / dequantize.h and docs/KERNELS.md ("Quantized weights").
#pragma once

#include <cstdint>
#include <string_view>

namespace tessel::kernels::quant {

// The enumerator values are ggml's type ids (GGUF tensor infos store them), except Int8's.
enum class QuantType : uint32_t {
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
  // Weight-only int8 with one symmetric scale per output channel (row), as "Efficiently Scaling
  // Transformer Inference" serves PaLM: each row is its f32 scale d (little-endian) followed by
  // k int8 codes in -127..127, x = d * q, any k. tessel's own (`--weights int8`): not a ggml type,
  // so it is never read from or written to a GGUF file.
  Int8 = 0x10000,
  // Q4_0's blocks regrouped four rows at a time for the CPU's decode rows (q4_0_groups.h): the
  // same bytes per row and the same values, made in memory from a Q4_0 matrix where the backend
  // asks for it (Backend::quant_layout), never read from or written to a file.
  Q4_0x4 = 0x10001,
  // The k-quants' super-blocks and Q8_0's blocks interleaved four rows at a time
  // (row_interleave.h): each block kept whole, block b of rows 4G..4G+3 side by side, so a
  // kernel multiplying four rows reads one sequential stream. Made in memory like Q4_0x4, never
  // read from or written to a file.
  Q4_Kx4 = 0x10002,
  Q5_Kx4 = 0x10003,
  Q6_Kx4 = 0x10004,
  Q8_0x4 = 0x10005,
};

// Bytes of an Int8 row's scale, before its codes.
inline constexpr int64_t kInt8ScaleBytes = 4;

// The GGUF (ggml) formats.
inline constexpr QuantType kAllQuantTypes[] = {QuantType::F16,  QuantType::BF16, QuantType::Q8_0,
                                               QuantType::Q4_0, QuantType::Q4_K, QuantType::Q5_K,
                                               QuantType::Q6_K};

// "q4_K", as ggml spells it; "int8", "q4_0x4", "q4_Kx4".
std::string_view quant_type_name(QuantType type);
// The type for a ggml type id; an Error names ids that are not (yet) supported here.
QuantType quant_type_from_ggml(uint32_t ggml_type);
bool is_ggml_type_supported(uint32_t ggml_type);

// Weights per block (1 for F16 / BF16 / Int8, 32 for Q8_0 / Q4_0, 256 for the k-quants) and its
// bytes (Int8: 1, its row's 4-byte scale apart).
int64_t block_elements(QuantType type);
int64_t block_bytes(QuantType type);

// Bytes of one row of k weights (Int8: k + 4). An Error names k and the block size when k is not a
// multiple of it (or is negative): ggml cannot store such a row either.
int64_t row_bytes(QuantType type, int64_t k);

}  // namespace tessel::kernels::quant
