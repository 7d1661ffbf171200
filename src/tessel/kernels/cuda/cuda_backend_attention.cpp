// SPDX-License-Identifier: Apache-2.0
// CudaBackend's attention family onto attention/attention.h: fused attention and its backward
// (the CPU's check_attention; the backward's workspace from the caching allocator), and the paged
// KV store and paged attention. The paged calls copy their index tensors (slots; block tables,
// sequence lengths and query starts) to the host and run the CPU's checks on them before anything
// is launched: the kernels skip a bad slot rather than refuse it, and a bad block-table entry
// would read outside the pools. That copy waits for the device; the tensors are small (one entry
// per token or per block) and a serving scheduler makes them on the host in the first place.
#include "tessel/kernels/cpu/attention_check.h"
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/cpu/paged_check.h"
#include "tessel/kernels/cuda/cuda_adapter.h"
#include "tessel/kernels/cuda/cuda_attention_adapter.h"
#include "tessel/kernels/cuda/cuda_backend.h"
#include "tessel/kernels/cuda/cuda_runtime.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::kernels::cuda {

namespace {

const int8_t* mask_data(const Tensor& mask) {
  return mask.defined() ? static_cast<const int8_t*>(device_data(mask)) : nullptr;
}

}  // namespace

void CudaBackend::attention(const AttentionDesc& desc, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& mask, Tensor& out, Tensor& lse) {
  check_attention("attention", desc, q, k, v, mask, out, lse);
  check_supported(*this, Op::Attention, q, "q");
  check_on_device("attention", {&q, &k, &v, &mask, &out, &lse});
  DeviceGuard guard(device_);
  attention_forward(attention_dims(desc), attn_type("attention", q.dtype()), device_data(q),
                    device_data(k), device_data(v), mask_data(mask), device_data(out),
                    static_cast<float*>(device_data(lse)), stream(device_));
}

void CudaBackend::attention_backward(const AttentionDesc& desc, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& mask, const Tensor& out,
                                     const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                                     Tensor& dv) {
  check_attention_backward("attention_backward", desc, q, k, v, mask, out, lse, dout, dq, dk, dv);
  check_supported(*this, Op::AttentionBackward, q, "q");
  check_on_device("attention_backward", {&q, &k, &v, &mask, &out, &lse, &dout, &dq, &dk, &dv});
  const AttentionDims d = attention_dims(desc);
  const AttnType type = attn_type("attention_backward", q.dtype());
  DeviceGuard guard(device_);
  const size_t bytes = attention_backward_workspace_bytes(d, type, deterministic_attention_);
  Tensor workspace = device_workspace(device_, bytes);
  kernels::cuda::attention_backward(
      d, type, device_data(q), device_data(k), device_data(v), mask_data(mask), device_data(out),
      static_cast<const float*>(device_data(lse)), device_data(dout), device_data(dq),
      device_data(dk), device_data(dv), device_data(workspace), bytes, deterministic_attention_,
      stream(device_));
}

void CudaBackend::paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots,
                                 Tensor& k_pool, Tensor& v_pool) {
  check_on_device("paged_kv_store", {&k, &v, &slots, &k_pool, &v_pool});
  const Tensor host_slots = slots.defined() ? to_device(slots, Device::cpu()) : slots;
  const PagedKvStoreShape s = validate_paged_kv_store(*this, k, v, host_slots, k_pool, v_pool);
  if (s.tokens == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::paged_kv_store(attn_type("paged_kv_store", k.dtype()), s.tokens, s.pool.kv_heads,
                                s.pool.head_dim, s.pool.num_blocks * s.pool.block_size,
                                device_data(k), device_data(v),
                                static_cast<const int64_t*>(device_data(slots)),
                                device_data(k_pool), device_data(v_pool), stream(device_));
}

void CudaBackend::paged_attention(const PagedAttentionDesc& desc, const Tensor& q,
                                  const Tensor& k_pool, const Tensor& v_pool,
                                  const Tensor& block_tables, const Tensor& seq_lens,
                                  const Tensor& query_starts, Tensor& out) {
  check_on_device("paged_attention",
                  {&q, &k_pool, &v_pool, &block_tables, &seq_lens, &query_starts, &out});
  auto host = [](const Tensor& t) { return t.defined() ? to_device(t, Device::cpu()) : t; };
  const PagedAttentionShape s = validate_paged_attention(
      *this, desc, q, k_pool, v_pool, host(block_tables), host(seq_lens), host(query_starts), out);
  if (s.tokens == 0) return;
  DeviceGuard guard(device_);
  kernels::cuda::paged_attention(
      paged_dims(s.tokens, s.heads, s.pool.kv_heads, s.pool.head_dim, s.pool.block_size,
                 s.sequences, s.max_blocks, desc),
      attn_type("paged_attention", q.dtype()), attn_type("paged_attention", k_pool.dtype()),
      device_data(q), device_data(k_pool), device_data(v_pool),
      static_cast<const int32_t*>(device_data(block_tables)),
      static_cast<const int64_t*>(device_data(seq_lens)),
      static_cast<const int64_t*>(device_data(query_starts)), device_data(out), stream(device_));
}

}  // namespace tessel::kernels::cuda
