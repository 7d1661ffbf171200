// SPDX-License-Identifier: Apache-2.0
// CUDA launchers for the fused softmax cross-entropy (Backend::cross_entropy and its backward) on
// device memory: logits [rows, vocab] of `dtype` (f32, bf16, f16), targets i32 / i64 [rows],
// per-row losses, lse and dlosses f32 (the stat dtype).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels::cuda {

// losses[n] = lse[n] - logits[n, t], lse[n] = log(sum(exp(logits[n, :]))), t = targets[n]; rows
// whose target is ignore_index get loss 0 (lse is still written). A target outside [0, vocab)
// that is not ignore_index sets *error = 1 (when error is non-null; the caller reads it after the
// stream synchronises and throws) and gets loss NaN.
void cross_entropy(DType dtype, const void* logits, DType target_dtype, const void* targets,
                   int64_t ignore_index, float* losses, float* lse, int64_t rows, int64_t vocab,
                   int* error, cudaStream_t stream);

// dlogits[n, :] = dlosses[n] * (exp(logits[n, :] - lse[n]) - onehot(t)); zero on ignored rows
// (and on rows with a bad target, which also set *error).
void cross_entropy_backward(DType dtype, const void* logits, DType target_dtype,
                            const void* targets, const float* lse, const float* dlosses,
                            int64_t ignore_index, void* dlogits, int64_t rows, int64_t vocab,
                            int* error, cudaStream_t stream);

}  // namespace tessel::kernels::cuda
