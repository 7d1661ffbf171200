// SPDX-License-Identifier: Apache-2.0
// The Mixtral family ("mixtral"; Jiang et al. 2024, "Mixtral of Experts"): Hugging Face's
// MixtralForCausalLM, computed by the LLaMA family's model (models/llama/) with every decoder
// layer's MLP replaced by a sparse mixture of SwiGLU experts (nn::MoE: softmax over the experts,
// the top num_experts_per_tok renormalised, no capacity). This file maps the stacked expert
// weights tessel holds ([experts, out, in]) to HF's one tensor per expert and back:
//
//   layers.N.block_sparse_moe.router.weight        <-> model.layers.N.block_sparse_moe.gate.weight
//   layers.N.block_sparse_moe.experts.gate_proj[e] <-> ...block_sparse_moe.experts.e.w1.weight
//   layers.N.block_sparse_moe.experts.up_proj[e]   <-> ...block_sparse_moe.experts.e.w3.weight
//   layers.N.block_sparse_moe.experts.down_proj[e] <-> ...block_sparse_moe.experts.e.w2.weight
//
// and every other tensor as the LLaMA family names it. hf_name gives a stacked weight the name
// "model.layers.N.block_sparse_moe.experts.w1" (the trainer's streamed checkpoint writes the
// stack whole); hf_layout accepts either form.
#pragma once

#include <string>

#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/models/llama/llama.h"

namespace tessel::models {

const Family& mixtral_family();

// HF name of a tessel parameter name (a stacked expert weight: the stack's name, see above).
std::string mixtral_hf_name(const std::string& name);
// The model's tensors under HF names, one per expert.
io::NamedTensors mixtral_to_hf(const Llama& model);
// Where `checkpoint` stores each tensor (per-expert tensors as HfStored::stacked, or the stacks
// whole); one Error lists every missing, unexpected and mis-shaped tensor in HF names and shapes.
HfLayout mixtral_hf_layout(const Llama& model, const io::SafetensorsCheckpoint& checkpoint);

// "tiny" (GPT-2 tiny's width and vocabulary, 4 experts top-2) and "mixtral-8x7b" (the published
// shape, without weights).
LlamaConfig mixtral_preset(const std::string& name);
const std::vector<std::string>& mixtral_preset_names();

}  // namespace tessel::models
