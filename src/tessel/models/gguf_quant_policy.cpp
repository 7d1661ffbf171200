// SPDX-License-Identifier: Apache-2.0
// The per-tensor type rules of quantized GGUF exports (gguf_quant_policy.h).
#include "tessel/models/gguf_quant_policy.h"

#include <regex>

#include "tessel/core/error.h"

namespace tessel::models {

namespace {

using kernels::quant::QuantType;

// llama.cpp's whole-file type numbers (general.file_type).
constexpr uint32_t kFileTypeQ4_0 = 2, kFileTypeQ8_0 = 7, kFileTypeQ4_K_M = 15, kFileTypeQ5_K_M = 17;

// The blocks whose attn_v / ffn_down get the larger type under q4_k_m: roughly half of them, the
// ends (most sensitive) and a regular stride through the middle.
bool more_bits(int64_t block, int64_t n_blocks) {
  const int64_t eighth = n_blocks / 8;
  return block < eighth || block >= 7 * n_blocks / 8 || (block - eighth) % 3 == 2;
}

}  // namespace

std::optional<uint32_t> gguf_quant_file_type(const std::string& export_type) {
  if (export_type == "q8_0") return kFileTypeQ8_0;
  if (export_type == "q4_0") return kFileTypeQ4_0;
  if (export_type == "q4_k_m") return kFileTypeQ4_K_M;
  if (export_type == "q5_k_m") return kFileTypeQ5_K_M;
  return std::nullopt;
}

GgufQuantChoice gguf_quant_choice(const std::string& export_type, const std::string& gguf_name,
                                  int64_t ndim, int64_t cols, int64_t n_blocks, bool tied_head) {
  TESSEL_CHECK(gguf_quant_file_type(export_type).has_value(), "gguf_quant_choice: '", export_type,
               "' is not a quantized export type");
  GgufQuantChoice choice;
  // As llama.cpp: a mixture of experts' router (blk.N.ffn_gate_inp) stays F32, so the quantized
  // model picks the experts the f32 one does wherever it is not near a tie.
  if (ndim < 2 || gguf_name.rfind("position_embd.", 0) == 0 ||
      gguf_name.find(".ffn_gate_inp.") != std::string::npos)
    return choice;
  QuantType type = export_type == "q8_0" ? QuantType::Q8_0 : QuantType::Q4_0;
  if (export_type == "q4_k_m" || export_type == "q5_k_m") {
    type = export_type == "q4_k_m" ? QuantType::Q4_K : QuantType::Q5_K;
    static const std::regex kBlockTensor(R"(blk\.(\d+)\.(attn_v|ffn_down|ffn_down_exps)\.weight)");
    std::smatch m;
    if (gguf_name == "output.weight" || (tied_head && gguf_name == "token_embd.weight"))
      type = QuantType::Q6_K;
    else if (std::regex_match(gguf_name, m, kBlockTensor) && more_bits(std::stoll(m[1]), n_blocks))
      type = QuantType::Q6_K;
  }
  const int64_t block = kernels::quant::block_elements(type);
  if (cols % block != 0) {
    choice.note = "rows of " + std::to_string(cols) + " are not a multiple of " +
                  std::string(kernels::quant::quant_type_name(type)) + "'s block of " +
                  std::to_string(block) + "; kept as F16";
    return choice;
  }
  choice.type = type;
  return choice;
}

}  // namespace tessel::models
