// SPDX-License-Identifier: Apache-2.0
// Validation of the paged KV-cache kernels (Backend::paged_kv_store, Backend::paged_attention),
// shared by the CPU and the reference backends: every size, dtype and index (slots, block-table
// entries, sequence lengths, query ranges) is checked before anything is read or written, and an
// Error names the op, the tensor and the wrong value.
#pragma once

#include <cstdint>

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

// The pools' geometry: [num_blocks, block_size, kv_heads, head_dim].
struct PagedPoolShape {
  int64_t num_blocks = 0, block_size = 0, kv_heads = 0, head_dim = 0;
};

struct PagedKvStoreShape {
  PagedPoolShape pool;
  int64_t tokens = 0;
};
PagedKvStoreShape validate_paged_kv_store(const Backend& backend, const Tensor& k, const Tensor& v,
                                          const Tensor& slots, const Tensor& k_pool,
                                          const Tensor& v_pool);

struct PagedAttentionShape {
  PagedPoolShape pool;
  int64_t tokens = 0, heads = 0, sequences = 0, max_blocks = 0;
  double scale = 0.0;  // resolved: 1/sqrt(D) when the descriptor says 0
};
PagedAttentionShape validate_paged_attention(const Backend& backend, const PagedAttentionDesc& desc,
                                             const Tensor& q, const Tensor& k_pool,
                                             const Tensor& v_pool, const Tensor& block_tables,
                                             const Tensor& seq_lens, const Tensor& query_starts,
                                             const Tensor& out);

}  // namespace tessel::kernels
