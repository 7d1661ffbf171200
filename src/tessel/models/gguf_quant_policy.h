// SPDX-License-Identifier: Apache-2.0
// Which ggml type each tensor of a quantized GGUF export gets (`tessel quantize --type q8_0 |
// q4_0 | q4_k_m | q5_k_m`), following llama.cpp's conventions for the whole-file types (facts from
// its documentation; the rules are written here):
//   - 1-D tensors (norm scales, biases) stay F32, and so does the learned position embedding,
//     which llama.cpp never quantizes (one row is read per token, so it costs nothing to keep),
//     and a mixture of experts' router (blk.N.ffn_gate_inp), which llama.cpp never quantizes;
//   - q8_0 / q4_0: every other matrix in that type;
//   - q4_k_m: Q4_K, except Q6_K for the LM head (output.weight, and token_embd.weight when the
//     head is tied to it) and for attn_v / ffn_down (ffn_down_exps, a Mixtral's stacked experts,
//     alike) in "half" of the blocks: the first and last
//     eighth of the blocks and every third block in between (llama.cpp's use_more_bits rule).
//   - q5_k_m: the same rule with Q5_K in place of Q4_K (Q6_K where q4_k_m has it), as llama.cpp's
//     Q5_K_M: only the base type differs between its two _M mixes.
// A matrix whose rows are not a multiple of the type's block stays F16, with a note.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tessel/kernels/quant/quant_format.h"

namespace tessel::models {

// llama.cpp's general.file_type of a quantized export type (q8_0 7, q4_0 2, q4_k_m 15,
// q5_k_m 17); null for
// the float types.
std::optional<uint32_t> gguf_quant_file_type(const std::string& export_type);
// The ggml GGUF quantization version tessel's blocks follow (general.quantization_version).
inline constexpr uint32_t kGgufQuantizationVersion = 2;

struct GgufQuantChoice {
  std::optional<kernels::quant::QuantType> type;  // null: kept as a float (F32 or F16)
  std::string note;                               // why a matrix was not quantized, if so
};
// The choice for tensor `gguf_name` of tessel shape `shape` ([rows, cols] for a matrix) in a
// `n_blocks`-block model whose LM head is tied to token_embd when `tied_head`.
GgufQuantChoice gguf_quant_choice(const std::string& export_type, const std::string& gguf_name,
                                  int64_t ndim, int64_t cols, int64_t n_blocks, bool tied_head);

}  // namespace tessel::models
