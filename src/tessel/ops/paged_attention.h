// SPDX-License-Identifier: Apache-2.0
// Attention over a block-paged KV cache (PagedAttention, Kwon et al. 2023, as vLLM serves): the
// keys and values of every running sequence live in fixed-size blocks of two shared pools, and a
// per-sequence block table maps positions to blocks, so a sequence grows one block at a time and
// sequences can share prefix blocks. Inference only: neither function records a backward, and
// asking for a gradient through them is an Error.
#pragma once

#include <cstdint>

#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// Writes the keys and values of N new tokens into the pools, in place: k_pool[slot[i]] = k[i],
// v_pool[slot[i]] = v[i] for k, v [N, Hkv, D] and pools [num_blocks, block_size, Hkv, D] (a slot
// is block * block_size + offset in the block). slots is i64 [N], every slot in range and
// distinct. k and v are converted to the pools' dtype when they differ (an f32 model over a bf16
// cache).
void paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_pool,
                    Tensor& v_pool);

struct PagedAttentionOptions {
  double scale = 0.0;  // 0 = 1/sqrt(D)
  int64_t window = 0;  // Mistral's sliding window, keys per query (itself included); 0 = unlimited
};

// Causal attention of a ragged batch of S sequences whose N new queries are packed in q [N, H, D].
// block_tables i32 [S, max_blocks]: sequence s's blocks in order (entries past its last block are
// ignored); seq_lens i64 [S]: its keys after this step, its new tokens included (their keys must
// be stored first); query_starts i64 [S + 1]: sequence s owns rows [query_starts[s],
// query_starts[s + 1]). Row j of sequence s (n_s rows) sits at position seq_lens[s] - n_s + j and
// sees the keys ops::attention's causal rule (and window) gives it; query head h reads kv head
// h / (H / Hkv). Returns [N, H, D] in q's dtype. On the CPU the result is batch-invariant: a row's
// bits do not depend on the other rows, sequences, the thread count or how its keys were written.
Tensor paged_attention(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                       const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_starts, const PagedAttentionOptions& options = {});

}  // namespace tessel::ops
