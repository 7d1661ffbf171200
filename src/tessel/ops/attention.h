// SPDX-License-Identifier: Apache-2.0
// Differentiable fused scaled-dot-product attention in the [B, T, H, D] layout, with multi-query /
// grouped-query attention (k and v may have fewer heads than q), causal masking and key padding.
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// softmax(q k^T * scale + masks) v for q [B, Tq, H, D], k and v [B, Tk, Hkv, D] (Hkv divides H).
// With `causal`, query i sees keys j <= i + (Tk - Tq). `mask` (optional, i8 [B, Tk], 1 = attend)
// hides padded keys. scale = 0 means 1/sqrt(D). Returns [B, Tq, H, D].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                 const Tensor& mask = Tensor(), double scale = 0.0);

}  // namespace tessel::ops
