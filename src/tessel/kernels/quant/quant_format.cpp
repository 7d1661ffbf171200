// SPDX-License-Identifier: Apache-2.0
// Names, ggml type ids and sizes of the GGUF weight formats (quant_format.h).
#include "tessel/kernels/quant/quant_format.h"

#include "tessel/core/error.h"
#include "tessel/kernels/quant/quant_blocks.h"

namespace tessel::kernels::quant {

std::string_view quant_type_name(QuantType type) {
  switch (type) {
    case QuantType::F16:
      return "f16";
    case QuantType::BF16:
      return "bf16";
    case QuantType::Q8_0:
      return "q8_0";
    case QuantType::Q4_0:
      return "q4_0";
    case QuantType::Q4_K:
      return "q4_K";
    case QuantType::Q5_K:
      return "q5_K";
    case QuantType::Q6_K:
      return "q6_K";
    case QuantType::Int8:
      return "int8";
    case QuantType::Q4_0x4:
      return "q4_0x4";
    case QuantType::Q4_Kx4:
      return "q4_Kx4";
    case QuantType::Q5_Kx4:
      return "q5_Kx4";
    case QuantType::Q6_Kx4:
      return "q6_Kx4";
    case QuantType::Q8_0x4:
      return "q8_0x4";
  }
  TESSEL_FAIL("quant_type_name: unknown quant type ", uint32_t(type));
}

bool is_ggml_type_supported(uint32_t ggml_type) {
  for (QuantType t : kAllQuantTypes)
    if (uint32_t(t) == ggml_type) return true;
  return false;
}

QuantType quant_type_from_ggml(uint32_t ggml_type) {
  TESSEL_CHECK(is_ggml_type_supported(ggml_type), "quant: ggml type id ", ggml_type,
               " is not a supported weight format (supported: f16=1, q4_0=2, q8_0=8, q4_K=12, "
               "q5_K=13, q6_K=14, bf16=30)");
  return QuantType(ggml_type);
}

int64_t block_elements(QuantType type) {
  switch (type) {
    case QuantType::F16:
    case QuantType::BF16:
    case QuantType::Int8:
      return 1;
    case QuantType::Q8_0:
    case QuantType::Q8_0x4:
    case QuantType::Q4_0:
    case QuantType::Q4_0x4:
      return kQBlock;
    case QuantType::Q4_K:
    case QuantType::Q5_K:
    case QuantType::Q6_K:
    case QuantType::Q4_Kx4:
    case QuantType::Q5_Kx4:
    case QuantType::Q6_Kx4:
      return kKBlock;
  }
  TESSEL_FAIL("block_elements: unknown quant type ", uint32_t(type));
}

int64_t block_bytes(QuantType type) {
  switch (type) {
    case QuantType::Int8:
      return 1;
    case QuantType::F16:
    case QuantType::BF16:
      return 2;
    case QuantType::Q8_0:
    case QuantType::Q8_0x4:
      return sizeof(BlockQ8_0);
    case QuantType::Q4_0:
    case QuantType::Q4_0x4:
      return sizeof(BlockQ4_0);
    case QuantType::Q4_K:
    case QuantType::Q4_Kx4:
      return sizeof(BlockQ4_K);
    case QuantType::Q5_K:
    case QuantType::Q5_Kx4:
      return sizeof(BlockQ5_K);
    case QuantType::Q6_K:
    case QuantType::Q6_Kx4:
      return sizeof(BlockQ6_K);
  }
  TESSEL_FAIL("block_bytes: unknown quant type ", uint32_t(type));
}

int64_t row_bytes(QuantType type, int64_t k) {
  const int64_t be = block_elements(type);
  TESSEL_CHECK(k >= 0 && k % be == 0, "quant: a ", quant_type_name(type), " row of ", k,
               " weights is not a multiple of the block size ", be);
  if (type == QuantType::Int8) return k + kInt8ScaleBytes;
  return k / be * block_bytes(type);
}

}  // namespace tessel::kernels::quant
