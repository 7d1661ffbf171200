// SPDX-License-Identifier: Apache-2.0
// GPT-2 in GGUF files (gpt2_gguf.cpp): the gpt2.* keys and the tensor names, for GPT2Family.
#pragma once

#include <string>

#include "tessel/io/gguf.h"
#include "tessel/io/safetensors.h"
#include "tessel/models/causal_lm.h"
#include "tessel/models/family.h"

namespace tessel::models {

// GGUF name of a tessel GPT-2 parameter ("h.0.attn.c_attn.weight" -> "blk.0.attn_qkv.weight").
std::string gpt2_gguf_name(const std::string& name);
ConfigPtr gpt2_config_from_gguf(const io::GgufFile& file);
void gpt2_config_to_gguf(const ModelConfig& config, io::GgufMetadata& out);
io::NamedTensors gpt2_to_gguf(const CausalLM& model);
void gpt2_load_gguf(CausalLM& model, const io::GgufFile& file);
// Every tensor as stored (GGUF keeps tessel's [out, in]); a tied head's output.weight skipped.
GgufLayout gpt2_gguf_layout(const CausalLM& model, const io::GgufFile& file);

}  // namespace tessel::models
