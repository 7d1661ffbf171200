// SPDX-License-Identifier: Apache-2.0
// Differentiable fused scaled-dot-product attention in the [B, T, H, D] layout, with multi-query /
// grouped-query attention (k and v may have fewer heads than q), causal masking, a sliding window
// (Mistral) and key padding.
#pragma once

#include <cstdint>

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// softmax(q k^T * scale + masks) v for q [B, Tq, H, D], k and v [B, Tk, Hkv, D] (Hkv divides H).
// With `causal`, query i sits at position p = i + (Tk - Tq) and sees keys j <= p. `window` > 0
// (causal only; Mistral's `sliding_window`, as Hugging Face masks it) keeps keys p - window < j
// <= p: at most `window` keys, the query's own included; 0 = unlimited (a window >= Tk changes
// nothing). `mask` (optional, i8 [B, Tk], 1 = attend) hides padded keys. scale = 0 means
// 1/sqrt(D). Returns [B, Tq, H, D].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                 const Tensor& mask = Tensor(), double scale = 0.0, int64_t window = 0);

// The same with named options: ops::attention(q, k, v, {.window = 4096}).
struct AttentionOptions {
  bool causal = true;
  Tensor mask;         // i8 [B, Tk], 1 = attend; undefined = no padding
  double scale = 0.0;  // 0 = 1/sqrt(D)
  int64_t window = 0;  // sliding window, keys per query; 0 = unlimited
};
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionOptions& options);

}  // namespace tessel::ops
