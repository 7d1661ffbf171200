// SPDX-License-Identifier: Apache-2.0
// GPT-2 (Radford et al., "Language Models are Unsupervised Multitask Learners", 2019), computed as
// Hugging Face transformers computes it: token + learned position embeddings, pre-LN blocks with
// tanh GELU, a final LayerNorm, and an LM head tied to the token embedding. Parameter names are
// Hugging Face's without the `transformer.` prefix (wte.weight, h.0.attn.c_attn.weight, ...), with
// weights in tessel's [out, in] layout. With TESSEL_DUMP_DIR set, each forward writes every named
// intermediate to DIR/activations-NNNN.safetensors for layer-by-layer comparison.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tessel/core/rng.h"
#include "tessel/models/gpt2_config.h"
#include "tessel/models/kv_cache.h"
#include "tessel/nn/nn.h"

namespace tessel::models {

class GPT2 : public nn::Module {
 public:
  // Random GPT-2 init from `generator` (normal(0, initializer_range), residual projections scaled
  // by 1/sqrt(2 n_layer), zero biases, unit LN scales); nn::Init::none() only allocates, which
  // touches no memory (used to build the big sizes shape-only).
  explicit GPT2(const GPT2Config& config, nn::Init init = {});
  static std::shared_ptr<GPT2> random(const GPT2Config& config, Generator& generator);

  const GPT2Config& config() const { return config_; }

  // ids i32/i64 [B, T] (T <= n_positions) -> logits [B, T, vocab].
  Tensor forward(const Tensor& ids);
  // Mean cross-entropy of forward(ids) against targets [B, T] (entries -100 are ignored).
  Tensor loss(const Tensor& ids, const Tensor& targets);
  // The token-embedding matrix the LM head multiplies with (wte.weight when tied).
  Tensor lm_head_weight() const;
  // Activation recomputation for every block (nn::Recompute); gradients stay bitwise the same.
  void set_recompute(nn::Recompute mode);
  nn::Recompute recompute() const { return recompute_; }

  // Greedy decoding, recomputing the whole sequence at every step; once the sequence is longer
  // than n_positions the model sees its last n_positions tokens. Returns only the new ids.
  std::vector<int64_t> generate_greedy(const std::vector<int64_t>& prompt, int64_t steps);

  // Incremental decoding (gpt2_decode.cpp): runs ids [B, T] at positions [cache.length(),
  // cache.length() + T) against the cached keys and values, stores the new ones and advances the
  // cache; returns logits [B, T, vocab], equal to the matching rows of forward() on the whole
  // sequence. Inference only: no gradients, no dropout, no observers. With `last_only` the logits
  // are [B, 1, vocab] for the last new position alone: all sampling needs, and it spares the LM
  // head (a quarter of a 124M model's prefill) on the rest of a prompt.
  Tensor forward_step(const Tensor& ids, KVCache& cache, bool last_only = false);
  // An empty cache for `batch` sequences of up to `capacity` tokens (0: n_positions).
  KVCache make_cache(int64_t batch, int64_t capacity = 0) const;

  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList> h;
  std::vector<std::shared_ptr<nn::Block>> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;  // only when tie_word_embeddings is false

 private:
  Tensor forward_impl(const Tensor& ids);
  GPT2Config config_;
  nn::Recompute recompute_ = nn::Recompute::None;
  int64_t dump_count_ = 0;
  bool warned_attn_pdrop_ = false;
};

}  // namespace tessel::models
