// SPDX-License-Identifier: Apache-2.0
// Validation of attention / attention_backward arguments against an AttentionDesc, shared by the
// CPU and the reference backends so that both reject the same calls with the same messages.
#pragma once

#include <cmath>
#include <string_view>

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

inline void check_attention_tensor(std::string_view op, const char* name, const Tensor& t,
                                   const Shape& want, DType dtype) {
  TESSEL_CHECK(t.defined(), op, ": ", name, " is undefined, expected ", want);
  TESSEL_CHECK(t.shape() == want, op, ": ", name, " has shape ", t.shape(), ", expected ", want);
  TESSEL_CHECK(t.dtype() == dtype, op, ": ", name, " is ", dtype_name(t.dtype()), ", expected ",
               dtype_name(dtype));
}

// Checks the forward arguments (out and lse are the forward's outputs, or the backward's saved
// tensors).
inline void check_attention(std::string_view op, const AttentionDesc& d, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
                            const Tensor& lse) {
  TESSEL_CHECK(d.batch >= 0 && d.q_len >= 0 && d.kv_len >= 0, op,
               ": sizes must be >= 0, got batch ", d.batch, " q_len ", d.q_len, " kv_len ",
               d.kv_len);
  TESSEL_CHECK(d.heads > 0 && d.kv_heads > 0 && d.head_dim > 0, op,
               ": heads, kv_heads and head_dim must be > 0, got ", d.heads, ", ", d.kv_heads, ", ",
               d.head_dim);
  TESSEL_CHECK(d.heads % d.kv_heads == 0, op, ": heads ", d.heads,
               " is not a multiple of kv_heads ", d.kv_heads);
  TESSEL_CHECK(std::isfinite(d.scale), op, ": scale must be finite, got ", d.scale);
  TESSEL_CHECK(d.window >= 0, op, ": window must be >= 0 (0 = unlimited), got ", d.window);
  TESSEL_CHECK(d.window == 0 || d.causal, op, ": window ", d.window,
               " needs causal attention (a sliding window counts back from each query's "
               "position)");
  TESSEL_CHECK(q.defined(), op, ": q is undefined");
  DType dt = q.dtype();
  TESSEL_CHECK(dtype_is_float(dt), op, ": q must be floating point, got ", dtype_name(dt));
  Shape q_shape{d.batch, d.q_len, d.heads, d.head_dim};
  Shape kv_shape{d.batch, d.kv_len, d.kv_heads, d.head_dim};
  check_attention_tensor(op, "q", q, q_shape, dt);
  check_attention_tensor(op, "k", k, kv_shape, dt);
  check_attention_tensor(op, "v", v, kv_shape, dt);
  check_attention_tensor(op, "out", out, q_shape, dt);
  check_attention_tensor(op, "lse", lse, Shape{d.batch, d.heads, d.q_len}, stat_dtype(dt));
  if (mask.defined()) check_attention_tensor(op, "mask", mask, Shape{d.batch, d.kv_len}, DType::I8);
}

inline void check_attention_backward(std::string_view op, const AttentionDesc& d, const Tensor& q,
                                     const Tensor& k, const Tensor& v, const Tensor& mask,
                                     const Tensor& out, const Tensor& lse, const Tensor& dout,
                                     const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  check_attention(op, d, q, k, v, mask, out, lse);
  Shape q_shape{d.batch, d.q_len, d.heads, d.head_dim};
  Shape kv_shape{d.batch, d.kv_len, d.kv_heads, d.head_dim};
  check_attention_tensor(op, "dout", dout, q_shape, q.dtype());
  check_attention_tensor(op, "dq", dq, q_shape, q.dtype());
  check_attention_tensor(op, "dk", dk, kv_shape, q.dtype());
  check_attention_tensor(op, "dv", dv, kv_shape, q.dtype());
}

}  // namespace tessel::kernels
