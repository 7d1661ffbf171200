// SPDX-License-Identifier: Apache-2.0
// Paged KV store and paged attention (paged_attention.h) through Backend::paged_kv_store and
// Backend::paged_attention; the kernels validate sizes and indices, this layer refuses gradients
// and matches dtypes.
#include "tessel/ops/paged_attention.h"

#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

// Grad mode on and an input that requires grad: a gradient was asked for and none can be given.
void check_inference(std::initializer_list<Tensor> inputs, const char* op) {
  if (!autograd::needs_grad(inputs)) return;
  for (const Tensor& t : inputs)
    TESSEL_CHECK(!t.defined() || !t.requires_grad(), op, ": ", detail::describe(t),
                 " requires grad, but ", op,
                 " is inference-only (it records no backward; run it under no-grad mode)");
}

}  // namespace

void paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_pool,
                    Tensor& v_pool) {
  detail::check_float(k_pool, "paged_kv_store", "k_pool", kernels::Op::PagedKvStore);
  detail::check_float(k, "paged_kv_store", "k", kernels::Op::PagedKvStore);
  detail::check_same_kind(k_pool, "k_pool", v_pool, "v_pool", "paged_kv_store");
  detail::check_same_kind(k, "k", v, "v", "paged_kv_store");
  check_inference({k, v, k_pool, v_pool}, "paged_kv_store");
  const DType dt = k_pool.dtype();
  detail::backend(k_pool).paged_kv_store(k.dtype() == dt ? k : k.to(dt),
                                         v.dtype() == dt ? v : v.to(dt), slots, k_pool, v_pool);
}

Tensor paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                       const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_starts, const PagedAttentionOptions& options) {
  detail::check_float(q, "paged_attention", "q", kernels::Op::PagedAttention);
  detail::check_float(k_pool, "paged_attention", "k_pool", kernels::Op::PagedAttention);
  detail::check_same_kind(k_pool, "k_pool", v_pool, "v_pool", "paged_attention");
  check_inference({q, k_pool, v_pool}, "paged_attention");
  TESSEL_CHECK(q.device() == k_pool.device(), "paged_attention: q ", detail::describe(q),
               " and k_pool ", detail::describe(k_pool), " are on different devices");
  TESSEL_CHECK(options.scale >= 0.0, "paged_attention: scale ", options.scale,
               " must be >= 0 (0 = 1/sqrt(D))");
  TESSEL_CHECK(options.window >= 0, "paged_attention: window ", options.window,
               " must be >= 0 (0 = unlimited)");
  kernels::PagedAttentionDesc desc;
  desc.scale = options.scale;
  desc.window = options.window;
  Tensor out = empty(q.shape(), q.dtype(), q.device());
  detail::backend(q).paged_attention(desc, q, k_pool, v_pool, block_tables, seq_lens, query_starts,
                                     out);
  return out;
}

}  // namespace tessel::ops
