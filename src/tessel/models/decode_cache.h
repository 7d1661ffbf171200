// SPDX-License-Identifier: Apache-2.0
// What a model's cached decoding asks of the store that holds past keys and values, so one decode
// path per family serves both holders: KVCache (a batch of equal-length sequences in contiguous
// buffers: `tessel generate`, eval) and the serving engine's paged cache (a ragged batch of
// sequences at different positions, their keys and values in fixed-size blocks). The family
// computes queries, keys and values; the cache places the keys and values and runs the attention
// over what each query may see.
#pragma once

#include <cstdint>

#include "tessel/tensor/tensor.h"

namespace tessel::models {

class DecodeCache {
 public:
  virtual ~DecodeCache() = default;

  // What it holds per token and layer: the model's (this rank's) KV heads of head_dim each.
  virtual int64_t n_layer() const = 0;
  virtual int64_t kv_heads() const = 0;
  virtual int64_t head_dim() const = 0;

  // Positions of a step's tokens ids [B, T], i64 [B, T]; each < position_end(B, T).
  virtual Tensor positions(int64_t batch, int64_t tokens) const = 0;
  // One past the largest position of the step (the model checks it against max_positions and
  // builds position tables that far).
  virtual int64_t position_end(int64_t batch, int64_t tokens) const = 0;

  // Stores the step's keys and values k, v [B, T, Hkv, D] of `layer` and returns the attention of
  // q [B, T, H, D] over every key its query may see (its own sequence, positions <= its own, and
  // within `window` keys when > 0, as ops::attention defines it): [B, T, H, D].
  virtual Tensor attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                        int64_t window) = 0;
};

}  // namespace tessel::models
