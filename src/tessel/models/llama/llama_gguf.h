// SPDX-License-Identifier: Apache-2.0
// LLaMA in GGUF files (llama_gguf.cpp): the llama.* keys, the tensor names, and the q/k row order
// (GGUF keeps Meta's interleaved-RoPE rows; tessel computes in Hugging Face's rotate_half order).
#pragma once

#include <string>

#include "tessel/io/gguf.h"
#include "tessel/io/safetensors.h"
#include "tessel/models/causal_lm.h"
#include "tessel/models/family.h"

namespace tessel::models {

// GGUF name of a tessel LLaMA parameter ("layers.0.self_attn.q_proj.weight" ->
// "blk.0.attn_q.weight").
std::string llama_gguf_name(const std::string& name);
// The rows of a q or k projection (weight [heads * head_dim, in] or bias) from HF's rotate_half
// order, where each head's rotated pairs are (i, i + head_dim / 2), to Meta's interleaved order,
// where they are (2i, 2i + 1) (to_interleaved), or back.
Tensor llama_permute_rope_rows(const Tensor& w, int64_t n_heads, bool to_interleaved);
ConfigPtr llama_config_from_gguf(const io::GgufFile& file);
void llama_config_to_gguf(const ModelConfig& config, io::GgufMetadata& out);
io::NamedTensors llama_to_gguf(const CausalLM& model);
void llama_load_gguf(CausalLM& model, const io::GgufFile& file);
// Every tensor as stored, q and k (weights and biases) with their rows in interleaved-RoPE order.
GgufLayout llama_gguf_layout(const CausalLM& model, const io::GgufFile& file);

}  // namespace tessel::models
