// SPDX-License-Identifier: Apache-2.0
// The attention launchers of attention.h: one check of the sizes (the same rules and messages as
// the CPU backend's check_attention, for what raw pointers can show), then the path: tensor cores
// for bf16 / f16 at head dim 64 or 128, the plain-FMA kernels otherwise (and for a deterministic
// backward pass).
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "tessel/core/error.h"
#include "tessel/kernels/cuda/attention/launch_internal.h"

namespace tessel::kernels::cuda {

namespace {

void check_dims(const char* op, const AttentionDims& d) {
  TESSEL_CHECK(d.batch >= 0 && d.q_len >= 0 && d.kv_len >= 0, op,
               ": sizes must be >= 0, got batch ", d.batch, " q_len ", d.q_len, " kv_len ",
               d.kv_len);
  TESSEL_CHECK(d.heads > 0 && d.kv_heads > 0 && d.head_dim > 0, op,
               ": heads, kv_heads and head_dim must be > 0, got ", d.heads, ", ", d.kv_heads, ", ",
               d.head_dim);
  TESSEL_CHECK(d.heads % d.kv_heads == 0, op, ": heads ", d.heads,
               " is not a multiple of kv_heads ", d.kv_heads);
  TESSEL_CHECK(d.head_dim <= kMaxHeadDim, op, ": head_dim ", d.head_dim,
               " is above the CUDA kernels' limit of ", kMaxHeadDim);
  TESSEL_CHECK(std::isfinite(d.scale), op, ": scale must be finite, got ", d.scale);
  TESSEL_CHECK(d.window >= 0, op, ": window must be >= 0 (0 = unlimited), got ", d.window);
  TESSEL_CHECK(d.window == 0 || d.causal, op, ": window ", d.window,
               " needs causal attention (a sliding window counts back from each query's "
               "position)");
}

std::atomic<AttentionPath>& path_setting() {
  static std::atomic<AttentionPath> path{[] {
    const char* env = std::getenv("TESSEL_CUDA_ATTENTION");
    return env != nullptr && std::string_view(env) == "plain" ? AttentionPath::Plain
                                                              : AttentionPath::Auto;
  }()};
  return path;
}

bool flash(const AttentionDims& d, AttnType type, std::initializer_list<const void*> ptrs) {
  return attention_path() == AttentionPath::Auto && detail::flash_supported(d, type, ptrs);
}

}  // namespace

void set_attention_path(AttentionPath path) {
  path_setting().store(path);
}
AttentionPath attention_path() {
  return path_setting().load();
}

void attention_forward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                       const void* v, const int8_t* mask, void* out, float* lse,
                       cudaStream_t stream) {
  check_dims("attention", d);
  if (flash(d, type, {q, k, v, out}))
    return detail::flash_forward(d, type, q, k, v, mask, out, lse, stream);
  detail::simple_forward(d, type, q, k, v, mask, out, lse, stream);
}

size_t attention_backward_workspace_bytes(const AttentionDims& d, AttnType type,
                                          bool deterministic) {
  if (!deterministic && flash(d, type, {}))
    return detail::flash_backward_workspace_floats(d) * sizeof(float);
  return size_t(d.batch * d.heads * d.q_len) * sizeof(float);
}

void attention_backward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                        const void* v, const int8_t* mask, const void* out, const float* lse,
                        const void* dout, void* dq, void* dk, void* dv, void* workspace,
                        size_t workspace_bytes, bool deterministic, cudaStream_t stream) {
  check_dims("attention_backward", d);
  const bool use_flash = !deterministic && flash(d, type, {q, k, v, dout, dk, dv});
  const size_t need = use_flash ? detail::flash_backward_workspace_floats(d) * sizeof(float)
                                : size_t(d.batch * d.heads * d.q_len) * sizeof(float);
  TESSEL_CHECK(workspace_bytes >= need && (need == 0 || workspace != nullptr),
               "attention_backward: workspace of ", workspace_bytes, " bytes, needs ", need);
  float* ws = static_cast<float*>(workspace);
  if (use_flash)
    return detail::flash_backward(d, type, q, k, v, mask, out, lse, dout, dq, dk, dv, ws, stream);
  detail::simple_backward(d, type, q, k, v, mask, out, lse, dout, dq, dk, dv, ws, stream);
}

}  // namespace tessel::kernels::cuda
