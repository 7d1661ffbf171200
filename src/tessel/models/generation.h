// SPDX-License-Identifier: Apache-2.0
// Text generation with a causal LM: the prompt is processed in one forward (prefill), then tokens
// are decoded one at a time against the key/value cache, each chosen by a Sampler. Reports the time
// of both phases so callers can print prompt and generation throughput.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tessel/models/causal_lm.h"
#include "tessel/models/sampling.h"

namespace tessel::models {

struct GenerationOptions {
  int64_t max_new_tokens = 16;
  SamplingOptions sampling;
  std::optional<int64_t> stop_token;  // generation ends after emitting it
  // Only ids below this are drawn (0: the whole vocabulary); a model whose vocabulary is padded
  // past its tokenizer's never emits ids that have no text.
  int64_t vocab_limit = 0;
  // Maps forward_step's logits to the full vocabulary before sampling (tensor parallelism, where
  // each rank computes its columns); empty: used as they are.
  std::function<Tensor(const Tensor&)> full_logits;
  // Called with each new token as soon as it is chosen; returning false stops generation.
  std::function<bool(int64_t)> on_token;
};

struct GenerationResult {
  std::vector<int64_t> tokens;  // the new tokens only
  // Each new token's logit in the logits it was drawn from (the full vocabulary's under tensor
  // parallelism): what tests compare across parallel layouts beside the ids.
  std::vector<float> token_logits;
  double prefill_seconds = 0;  // the prompt's forward
  // The single-token forwards after the prompt (one per new token but the last) and the sampling
  // of every new token.
  double decode_seconds = 0;
  int64_t decode_forwards = 0;
  bool stopped = false;  // ended by stop_token or on_token rather than by max_new_tokens
  // Bytes of the KV cache allocated for prompt + max_new_tokens positions (this rank's layers and
  // heads): what `tessel plan --serve` predicts per rank.
  int64_t kv_cache_bytes = 0;
  // The host allocator's bytes in use when generation began (the loaded model) and its peak above
  // them during generation (the cache, activations and workspace): what `tessel plan --serve`
  // predicts as kv + workspace per rank.
  int64_t allocator_base_bytes = 0;
  int64_t allocator_peak_bytes = 0;
};

// Throws before any work when prompt + max_new_tokens exceeds max_positions.
GenerationResult generate(CausalLM& model, const std::vector<int64_t>& prompt,
                          const GenerationOptions& options);

}  // namespace tessel::models
