// SPDX-License-Identifier: Apache-2.0
// CUDA launchers for Backend::embedding and embedding_backward on device memory: weight /
// dweight [vocab, cols] and out / dout [n, cols] of `dtype` (f32, bf16, f16), ids i32 / i64 [n].
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels::cuda {

// out[i, :] = weight[ids[i], :] (bits copied). An id outside [0, vocab) sets *error = 1 (when
// error is non-null; the caller checks it after the stream synchronises) and zeroes its row.
void embedding(DType dtype, const void* weight, DType id_dtype, const void* ids, void* out,
               int64_t n, int64_t vocab, int64_t cols, int* error, cudaStream_t stream);

// Device scratch embedding_backward needs for n ids.
size_t embedding_backward_workspace_bytes(int64_t n);

// dweight[ids[i], :] += dout[i, :] (accumulates). Deterministic: the (id, i) pairs are sorted
// by id with a stable radix sort, and each row of dweight then receives its additions in order of
// i, one f32 running sum per element started from dweight's value and rounded once, which is the
// CPU kernel's order exactly. Bad ids set *error and are skipped. vocab < 2^32 - 1.
void embedding_backward(DType dtype, const void* dout, DType id_dtype, const void* ids,
                        void* dweight, int64_t n, int64_t vocab, int64_t cols, void* workspace,
                        int* error, cudaStream_t stream);

}  // namespace tessel::kernels::cuda
