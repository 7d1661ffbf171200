// SPDX-License-Identifier: Apache-2.0
// The key/value cache of incremental decoding: per layer, the keys and values of every token
// already processed, so each new token attends to them without recomputing them. Buffers are
// allocated once for a fixed capacity ([B, capacity, H, D] per layer) and filled in place. Every
// sequence of the batch is at the same position: length().
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tessel/models/decode_cache.h"
#include "tessel/tensor/tensor.h"

namespace tessel::models {

class KVCache final : public DecodeCache {
 public:
  KVCache() = default;
  // The buffers live on `device` (the model's: the host or a CUDA device).
  KVCache(int64_t n_layer, int64_t batch, int64_t capacity, int64_t n_head, int64_t head_dim,
          DType dtype = DType::F32, Device device = Device::cpu());

  int64_t n_layer() const override { return int64_t(keys_.size()); }
  int64_t kv_heads() const override { return n_head_; }
  int64_t head_dim() const override { return head_dim_; }
  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  int64_t n_head() const { return n_head_; }
  DType dtype() const { return dtype_; }
  // Tokens cached and committed by advance(); the position of the next token.
  int64_t length() const { return length_; }

  // Stores k, v [B, T, H, D] of `layer` at positions [length, length + T) and returns the keys and
  // values of positions [0, length + T), each [B, length + T, H, D]. A view of the buffer when
  // B == 1, a copy otherwise (tensors are contiguous). Every layer appends the same T before
  // advance(T) commits them.
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& k, const Tensor& v);
  void advance(int64_t tokens);

  // DecodeCache: positions [length, length + T) for every row; attend() stores k and v, then runs
  // causal attention with the query at position length + i: through ops::paged_attention over
  // the buffers in place when T < kPagedRows (decode; no gradient, host or meta), else through
  // ops::attention over append()'s keys and values. The caller advances after the step.
  Tensor positions(int64_t batch, int64_t tokens) const override;
  int64_t position_end(int64_t batch, int64_t tokens) const override;
  Tensor attend(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                int64_t window) override;
  // Steps of fewer new tokens a sequence than this attend through ops::paged_attention (decode;
  // the planner's serving memory formula counts them so).
  static constexpr int64_t kPagedRows = 4;

  // Forgets every token (the buffers are kept).
  void reset() { length_ = 0; }
  // Bytes held by the buffers.
  size_t nbytes() const;

 private:
  // Writes k, v at [length, length + T) of `layer`; returns length + T.
  int64_t store(int64_t layer, const Tensor& k, const Tensor& v);

  std::vector<Tensor> keys_, values_;
  int64_t batch_ = 0, capacity_ = 0, n_head_ = 0, head_dim_ = 0, length_ = 0;
  DType dtype_ = DType::F32;
  Device device_ = Device::cpu();
};

}  // namespace tessel::models
