// SPDX-License-Identifier: Apache-2.0
// Raw CUDA launchers of the attention kernels: device pointers, sizes and a stream, no Tensor
// (the CUDA backend adapts Backend::attention, attention_backward, paged_kv_store and
// paged_attention onto these). Layouts and semantics are exactly Backend's (kernels/backend.h):
// q, out, dout, dq [B, Tq, H, D]; k, v, dk, dv [B, Tk, Hkv, D]; lse [B, H, Tq] in f32; mask
// i8 [B, Tk] (1 = attend) or null; causal offset Tk - Tq, sliding window, GQA (Hkv divides H), a
// row that sees no key gives 0 and lse = -inf. Every launcher checks its sizes and throws
// tessel::Error naming the wrong value; kernel launch errors are reported the same way. Kernels
// run asynchronously on `stream`.
//
// Paths (docs/KERNELS.md, "CUDA attention"): bf16 / f16 with head dim 64 or 128 run the tensor-core
// kernels (FlashAttention-2); f32 and the other head dims (<= 256) run the plain-FMA kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tessel::kernels::cuda {

enum class AttnType { F32, BF16, F16 };

// Backend's AttentionDesc, field for field.
struct AttentionDims {
  int64_t batch = 0, q_len = 0, kv_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = true;
  double scale = 0.0;
  int64_t window = 0;
};

// Which kernels attention_forward / attention_backward may use: Auto picks the tensor-core
// kernels where they apply; Plain always takes the plain-FMA ones (a fallback, and the second
// opinion of the GPU test). The process starts at Plain when the environment sets
// TESSEL_CUDA_ATTENTION=plain, else at Auto.
enum class AttentionPath { Auto, Plain };
void set_attention_path(AttentionPath path);
AttentionPath attention_path();

// The largest head dim any attention launcher accepts.
inline constexpr int64_t kMaxHeadDim = 256;

// Forward: out and lse (f32 [B, H, Tq]).
void attention_forward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                       const void* v, const int8_t* mask, void* out, float* lse,
                       cudaStream_t stream);

// Bytes of device workspace attention_backward needs: f32 D_i = rowsum(dO * O) per query row,
// and on the tensor-core path an f32 dQ accumulator ([B, Tq, H, D]).
size_t attention_backward_workspace_bytes(const AttentionDims& d, AttnType type,
                                          bool deterministic);

// Backward from the saved out and lse: dq, dk, dv overwritten (keys no query sees get 0).
// bf16 / f16 at head dim 64 or 128 (16-byte aligned pointers) run the tensor-core kernel, whose
// dQ is summed over key blocks with f32 atomics: the last bits may differ between two runs.
// `deterministic` takes the plain-FMA kernels instead (each dQ, dK, dV row summed by one warp
// in a fixed order: identical bits on every run, several times slower); f32 and other head dims
// always take them.
void attention_backward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                        const void* v, const int8_t* mask, const void* out, const float* lse,
                        const void* dout, void* dq, void* dk, void* dv, void* workspace,
                        size_t workspace_bytes, bool deterministic, cudaStream_t stream);

// paged_kv_store: k_pool[slots[i]] = k[i], v_pool[slots[i]] = v[i] for k, v [tokens, Hkv, D] and
// pools [num_blocks * block_size, Hkv, D] of one dtype. The caller checks the slots (in range,
// distinct) as Backend requires; a slot outside [0, num_slots) is skipped here, never written.
void paged_kv_store(AttnType type, int64_t tokens, int64_t kv_heads, int64_t head_dim,
                    int64_t num_slots, const void* k, const void* v, const int64_t* slots,
                    void* k_pool, void* v_pool, cudaStream_t stream);

// Backend's paged_attention, with the validated sizes: q, out [tokens, heads, D] of q_type; pools
// [num_blocks, block_size, kv_heads, D] of pool_type; block_tables i32 [sequences, max_blocks];
// seq_lens i64 [sequences]; query_starts i64 [sequences + 1]. scale 0 means 1/sqrt(D).
struct PagedDims {
  int64_t tokens = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t block_size = 0, sequences = 0, max_blocks = 0;
  double scale = 0.0;
  int64_t window = 0;
};
void paged_attention(const PagedDims& d, AttnType q_type, AttnType pool_type, const void* q,
                     const void* k_pool, const void* v_pool, const int32_t* block_tables,
                     const int64_t* seq_lens, const int64_t* query_starts, void* out,
                     cudaStream_t stream);

}  // namespace tessel::kernels::cuda
