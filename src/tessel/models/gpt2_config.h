// SPDX-License-Identifier: Apache-2.0
// GPT-2's hyper-parameters, read from a Hugging Face config.json (GPT2Config keys and their
// aliases) and written back in the same form, plus the four published sizes. Unknown keys are
// ignored as Hugging Face does; known keys are type- and range-checked, and settings tessel does
// not implement (another activation, per-layer attention scaling, reordered upcast) are errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/nn/transformer.h"

namespace tessel::models {

struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0 (null in JSON): 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  double resid_pdrop = 0.1, embd_pdrop = 0.1, attn_pdrop = 0.1;
  double initializer_range = 0.02;
  bool tie_word_embeddings = true;
  int64_t bos_token_id = 50256, eos_token_id = 50256;

  // Parses config.json text; `what` names the source in errors.
  static GPT2Config from_json(const std::string& text, const std::string& what = "config.json");
  static GPT2Config from_file(const std::string& path);
  // The four published sizes under both names people use: the parameter count and the Hugging
  // Face checkpoint's size word: "124M" / "small" (gpt2), "355M" / "medium", "774M" / "large",
  // "1558M" / "xl" ("1.5B" also accepted); and tessel's "tiny" (4 x 192, about 11.5M parameters,
  // most in wte: the default of `tessel train`).
  static GPT2Config preset(const std::string& name);
  // The names preset() takes, as docs/TRAINING.md lists them.
  static const std::vector<std::string>& preset_names();

  // config.json text in the Hugging Face layout.
  std::string to_json() const;
  void validate() const;
  int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  // Parameters of the model this config builds, computed without building it.
  int64_t parameter_count() const;
  nn::BlockConfig block_config() const;
};

}  // namespace tessel::models
