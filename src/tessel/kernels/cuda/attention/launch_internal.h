// SPDX-License-Identifier: Apache-2.0
// The per-path launchers behind attention.h (private to kernels/cuda/attention): attention.cu
// validates the arguments once and picks one of these.
#pragma once

#include <initializer_list>

#include "tessel/kernels/cuda/attention/attention.h"

namespace tessel::kernels::cuda::detail {

// Plain-FMA kernels (attention_simple.cu): any dtype, head dim <= kMaxHeadDim.
void simple_forward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                    const void* v, const int8_t* mask, void* out, float* lse, cudaStream_t stream);
void simple_backward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                     const void* v, const int8_t* mask, const void* out, const float* lse,
                     const void* dout, void* dq, void* dk, void* dv, float* rowdot,
                     cudaStream_t stream);

// Tensor-core forward (flash_forward.cu): bf16 / f16, head dim 64 or 128, 16-byte aligned rows.
// Whether the tensor-core kernels take this problem: bf16 / f16, head dim 64 or 128, every
// pointer 16-byte aligned.
bool flash_supported(const AttentionDims& d, AttnType type,
                     std::initializer_list<const void*> ptrs);
void flash_forward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                   const void* v, const int8_t* mask, void* out, float* lse, cudaStream_t stream);

// Tensor-core backward (flash_backward.cu): the forward's conditions, dQ summed with f32 atomics
// into the workspace (flash_backward_workspace_floats: D_i per row, then the dQ accumulator).
size_t flash_backward_workspace_floats(const AttentionDims& d);
void flash_backward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                    const void* v, const int8_t* mask, const void* out, const float* lse,
                    const void* dout, void* dq, void* dk, void* dv, float* workspace,
                    cudaStream_t stream);

}  // namespace tessel::kernels::cuda::detail
