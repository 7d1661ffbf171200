// SPDX-License-Identifier: Apache-2.0
// How CudaBackend's attention adapter speaks to the launchers of attention/attention.h: the
// Backend's descriptors and dtypes in the launchers' terms (a header of its own so that a test
// without a GPU can check the mapping).
#pragma once

#include "tessel/kernels/backend.h"
#include "tessel/kernels/cuda/attention/attention.h"

namespace tessel::kernels::cuda {

// AttentionDesc, field for field.
inline AttentionDims attention_dims(const AttentionDesc& d) {
  AttentionDims a;
  a.batch = d.batch;
  a.q_len = d.q_len;
  a.kv_len = d.kv_len;
  a.heads = d.heads;
  a.kv_heads = d.kv_heads;
  a.head_dim = d.head_dim;
  a.causal = d.causal;
  a.scale = d.scale;
  a.window = d.window;
  return a;
}

// The launchers' element type of a tensor dtype; Error naming `op` for any other.
inline AttnType attn_type(std::string_view op, DType dtype) {
  switch (dtype) {
    case DType::F32:
      return AttnType::F32;
    case DType::BF16:
      return AttnType::BF16;
    case DType::F16:
      return AttnType::F16;
    default:
      TESSEL_FAIL(op, " on CUDA: dtype ", dtype_name(dtype), " is not supported (f32, bf16, f16)");
  }
}

// Paged attention's sizes once the CPU's checks have resolved them (scale: 0 means 1/sqrt(D)).
inline PagedDims paged_dims(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                            int64_t block_size, int64_t sequences, int64_t max_blocks,
                            const PagedAttentionDesc& desc) {
  PagedDims p;
  p.tokens = tokens;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.sequences = sequences;
  p.max_blocks = max_blocks;
  p.scale = desc.scale;
  p.window = desc.window;
  return p;
}

}  // namespace tessel::kernels::cuda
