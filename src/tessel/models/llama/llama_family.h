// SPDX-License-Identifier: Apache-2.0
// The LLaMA family ("llama"): one implementation behind Hugging Face's LlamaForCausalLM,
// MistralForCausalLM and Qwen2ForCausalLM (model_type llama, mistral, qwen2). Tensor names are
// HF's: "model." + tessel's name, except lm_head.weight; no weight is transposed.
//
// Loading (hf_layout, load_hf) takes the names with or without the "model." prefix, widens f16 /
// bf16, skips the rotary_emb.inv_freq buffers older checkpoints carry, accepts a tied head's
// lm_head.weight only when it equals the embedding (absent is the usual case), and raises one Error
// that lists every missing, unexpected and mis-shaped tensor in HF names and shapes.
#pragma once

#include <string>

#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/models/llama/llama.h"

namespace tessel::models {

const Family& llama_family();

// HF name of a tessel parameter name, and back (an Error for a name of neither form).
std::string llama_hf_name(const std::string& name);
// The model's tensors under HF names (what model.safetensors holds).
io::NamedTensors llama_to_hf(const Llama& model);
// Where `checkpoint` stores each tensor of `model` (Family::hf_layout).
HfLayout llama_hf_layout(const Llama& model, const io::SafetensorsCheckpoint& checkpoint);

}  // namespace tessel::models
