// SPDX-License-Identifier: Apache-2.0
// GPT-2 in the Hugging Face directory layout: config.json plus model.safetensors (or shards with
// model.safetensors.index.json). Loading accepts names with or without the `transformer.` prefix,
// transposes the four Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj: stored
// [in, out]) into tessel's [out, in], skips the attn.bias / attn.masked_bias mask buffers, and
// accepts lm_head.weight only when the head is untied or it equals wte.weight.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessel/io/safetensors_dir.h"
#include "tessel/models/family.h"
#include "tessel/models/gpt2/gpt2.h"

namespace tessel::models {

// Whether a tessel GPT-2 parameter is stored transposed (a Conv1D weight) in the HF layout.
bool gpt2_is_conv1d_weight(const std::string& name);

// The tensors of `model` as Hugging Face stores them (Conv1D weights transposed to [in, out]),
// named with `prefix` ("" or "transformer."); lm_head.weight only when untied.
io::NamedTensors gpt2_to_hf(const GPT2& model, const std::string& prefix = "");

// Where `checkpoint` stores each tensor of `model` (names with or without the prefix; Family::
// hf_layout). One Error lists every missing, unexpected and mis-shaped tensor, in HF names and
// shapes.
HfLayout gpt2_hf_layout(const GPT2& model, const io::SafetensorsCheckpoint& checkpoint);

// Builds the model from `dir`/config.json and loads its weights (in f32).
std::shared_ptr<GPT2> load_gpt2(const std::string& dir);

struct GPT2SaveOptions {
  std::string prefix;  // "" (the Hub's layout) or "transformer."
  uint64_t max_shard_bytes = uint64_t(5) << 30;
};
// Writes config.json and the weights into `dir` (created if missing).
void save_gpt2(const GPT2& model, const std::string& dir, const GPT2SaveOptions& options = {});

}  // namespace tessel::models
