// SPDX-License-Identifier: Apache-2.0
// Differentiable rotary position embedding (Su et al. 2021, RoFormer) in the Hugging Face
// "rotate_half" layout of Llama, Mistral and Qwen2. The cos / sin tables (inv_freq from rope_theta
// and rope_scaling) are the model's; this op applies them.
#pragma once

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// x [B, T, H, D] (D even); cos and sin [P, D/2] (f32, or f64 for f64 x); positions i32 / i64
// [B, T], each in [0, P). Per head vector, with x1 = x[..., :D/2], x2 = x[..., D/2:] and the
// table rows c, s at the token's position: [x1 c - x2 s, x2 c + x1 s]. Returns x's shape and
// dtype. Differentiable w.r.t. x (the backward is the inverse rotation); the tables and
// positions get no gradient.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions);

}  // namespace tessel::ops
