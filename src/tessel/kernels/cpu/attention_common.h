// SPDX-License-Identifier: Apache-2.0
// Shared setup of the CPU flash attention forward and backward passes (private to cpu/): typed
// views of the [B, T, heads, D] tensors and the per-tile visibility rules (causal offset, sliding
// window and padding mask).
#pragma once

#include <algorithm>
#include <cstdint>

#include "tessel/kernels/backend.h"
#include "tessel/kernels/cpu/attention_tiles.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA::attention_tiles {

template <typename T>
struct Problem {
  int64_t batch, tq, tk, heads, kv_heads, group, dim;
  bool causal;
  T scale;
  int64_t offset;      // causal: query i sees keys j <= i + offset
  int64_t window;      // > 0 (causal, < Tk: a longer one is none): and keys j > i + offset - window
  const int8_t* mask;  // [B, Tk] or null

  static Problem make(const AttentionDesc& d, const Tensor& mask) {
    return {d.batch,
            d.q_len,
            d.kv_len,
            d.heads,
            d.kv_heads,
            d.heads / d.kv_heads,
            d.head_dim,
            d.causal,
            T(d.scale),
            d.kv_len - d.q_len,
            d.causal && d.window < d.kv_len ? d.window : 0,
            mask.defined() ? mask.data<int8_t>() : nullptr};
  }
  // Row strides of q-like [B, Tq, H, D] and k-like [B, Tk, Hkv, D] tensors, and row offsets.
  int64_t q_ld() const { return heads * dim; }
  int64_t kv_ld() const { return kv_heads * dim; }
  int64_t q_at(int64_t b, int64_t i, int64_t h) const { return ((b * tq + i) * heads + h) * dim; }
  int64_t kv_at(int64_t b, int64_t j, int64_t h) const {
    return ((b * tk + j) * kv_heads + h) * dim;
  }
  int64_t key_tiles() const { return (tk + kKeyTile<T> - 1) / kKeyTile<T>; }
  // One past the last key that query i may see (0 when it sees none).
  int64_t key_end(int64_t i) const {
    return causal ? std::clamp<int64_t>(i + offset + 1, 0, tk) : tk;
  }
  // The first key that query i may see: the sliding window's start, else 0. Query i sees
  // [key_begin(i), key_end(i)) less padding; both bounds grow with i.
  int64_t key_begin(int64_t i) const {
    return window > 0 ? std::clamp<int64_t>(i + offset - window + 1, 0, tk) : 0;
  }
  // One past the last query that sees key j (queries from the causal start up to here see it).
  int64_t query_end(int64_t j) const {
    return window > 0 ? std::clamp<int64_t>(j + window - offset, 0, tq) : tq;
  }
  // The first query that sees key j.
  int64_t query_begin(int64_t j) const {
    return causal ? std::clamp<int64_t>(j - offset, 0, tq) : 0;
  }
  // bias[j] = 0 for a key of the tile [j0, j0 + kKeyTile<T>) that exists and is not padding, -inf
  // otherwise. Returns whether any key of the tile is visible.
  bool key_bias(int64_t b, int64_t j0, T* bias) const {
    bool any = false;
    for (int j = 0; j < kKeyTile<T>; ++j) {
      bool vis = j0 + j < tk && (mask == nullptr || mask[b * tk + j0 + j] != 0);
      bias[j] = vis ? T(0) : kNegInf<T>;
      any |= vis;
    }
    return any;
  }
};

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::attention_tiles
