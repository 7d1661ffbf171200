// SPDX-License-Identifier: Apache-2.0
// The small LLaMA the model tests build (3 blocks of width 24, 4 query heads over 2 K/V heads of
// 6, SwiGLU 40, vocabulary 37): odd sizes that expose indexing bugs, grouped-query attention, and
// an initialiser range wider than published so that every path moves the logits.
#pragma once

#include "tessel/models/llama/llama.h"

namespace tessel::test {

inline models::LlamaConfig small_llama_config(
    models::LlamaVariant variant = models::LlamaVariant::Llama) {
  models::LlamaConfig c;
  c.variant = variant;
  c.vocab_size = 37;
  c.hidden = 24;
  c.intermediate_size = 40;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 6;
  c.max_position_embeddings = 32;
  c.initializer_range = 0.2;
  return c;
}

}  // namespace tessel::test
