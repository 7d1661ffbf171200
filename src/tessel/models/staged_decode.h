// SPDX-License-Identifier: Apache-2.0
// Cached decoding cut into pipeline stages (GPipe, Huang et al. 2019, applied to inference as in
// EnergonAI and DeepSpeed-Inference): a stage runs only its contiguous range of blocks against a
// DecodeCache that may hold only those blocks' keys and values, so each pipeline rank of
// `tessel generate --pp` / `tessel serve --pp` keeps the KV pages of its own layers. The first
// stage embeds the ids, the last one applies the final norm and the LM head; composing the stages
// computes exactly CausalLM::forward_cached, op for op (so --pp equals one process bitwise).
//
// A family that supports pipelined decoding derives from StagedDecode next to CausalLM; its
// forward_cached is cached_head(forward_cached_layers(0, L, ids, cache), rows).
#pragma once

#include <cstdint>
#include <string>

#include "tessel/core/error.h"
#include "tessel/models/decode_cache.h"
#include "tessel/tensor/tensor.h"

namespace tessel::models {

class StagedDecode {
 public:
  virtual ~StagedDecode() = default;

  // Blocks [first, last) of the model's L over the step's tokens, storing their keys and values in
  // `cache`. `input` is ids i32/i64 [B, T] when first == 0 (the embedding runs here), else the
  // hidden states [B, T, C] that block first - 1 produced. `cache` holds either every block
  // (n_layer() == L: block l is its layer l) or only these (n_layer() == last - first: block l is
  // its layer l - first). Returns the hidden states after block last - 1, [B, T, C]. Inference
  // only.
  virtual Tensor forward_cached_layers(int64_t first, int64_t last, const Tensor& input,
                                       DecodeCache& cache) = 0;
  // The last stage's end: hidden [B, T, C] -> the final norm and the LM head over the tokens
  // `rows` names (i64 [R], row-major indices into B x T): [R, V]; without rows [B, T, V].
  virtual Tensor cached_head(const Tensor& hidden, const Tensor& rows) = 0;
};

// Checks a stage's arguments as forward_cached_layers states them: [first, last) within the
// model's `total` blocks, ids i32/i64 [B, T] for the first stage, else hidden [B, T, width].
// `who` names the family's method in the error.
inline void check_stage_input(const char* who, int64_t first, int64_t last, int64_t total,
                              const Tensor& input, int64_t width) {
  TESSEL_CHECK(0 <= first && first <= last && last <= total, who, ": blocks [", first, ", ", last,
               ") outside [0, ", total, "]");
  const bool embeds = first == 0;
  TESSEL_CHECK(
      embeds ? input.ndim() == 2 && (input.dtype() == DType::I64 || input.dtype() == DType::I32)
             : input.ndim() == 3 && input.size(2) == width,
      who, ": input ", input.shape(), " ", dtype_name(input.dtype()), " expected ",
      embeds ? std::string("ids i32/i64 [B, T]") : detail::concat("hidden [B, T, ", width, "]"));
}

// The cache layer of block `layer` for a stage running [first, last) of `total` blocks (see
// forward_cached_layers); checks the cache's depth.
inline int64_t stage_cache_layer(const DecodeCache& cache, int64_t first, int64_t last,
                                 int64_t total, int64_t layer) {
  if (cache.n_layer() == total) return layer;
  TESSEL_CHECK(cache.n_layer() == last - first, "forward_cached_layers: a cache of ",
               cache.n_layer(), " layers for blocks [", first, ", ", last, ") of ", total,
               " (it must hold every block or exactly these)");
  return layer - first;
}

}  // namespace tessel::models
