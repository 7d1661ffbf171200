// SPDX-License-Identifier: Apache-2.0
// CUDA launchers for Backend::softmax / softmax_backward over the last dim of [rows, cols]
// device tensors of `dtype` (f32, bf16, f16; computed in f32).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels::cuda {

// y = softmax(x) (log-softmax when `log`), stable (the row max is subtracted). y may be x.
void softmax(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, bool log,
             cudaStream_t stream);

// From the forward output y: dx = y * (dy - sum(dy * y)), or for log-softmax
// dx = dy - exp(y) * sum(dy). dx may alias dy.
void softmax_backward(DType dtype, const void* y, const void* dy, void* dx, int64_t rows,
                      int64_t cols, bool log, cudaStream_t stream);

}  // namespace tessel::kernels::cuda
