// SPDX-License-Identifier: Apache-2.0
// CUDA launchers for LayerNorm and RMSNorm over the last dim (Backend::layer_norm, rms_norm and
// their backward) on device memory: x, y, dy, dx [rows, cols] and weight, bias, dweight, dbias
// [cols] of `dtype` (f32, bf16, f16; computed in f32); mean and rstd f32 [rows], saved by the
// forward exactly as the CPU saves them (mean of the row, 1 / sqrt(var + eps)).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels::cuda {

// y = (x - mean) * rstd * weight + bias; weight / bias null = no affine (1 / 0); mean / rstd may
// be null (not saved).
void layer_norm(DType dtype, const void* x, const void* weight, const void* bias, double eps,
                void* y, float* mean, float* rstd, int64_t rows, int64_t cols, cudaStream_t stream);

// Device scratch for the backward launchers' weight / bias gradients (0 when rows or cols is 0).
size_t norm_backward_workspace_bytes(int64_t rows, int64_t cols);

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight, xhat = (x - mean) * rstd;
// dweight = sum over rows of dy * xhat and dbias = sum of dy, overwritten (either may be null).
// Those sums are taken per fixed chunk of rows into `workspace`, then the chunks in order: the
// same bits on every run.
void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* weight,
                         const float* mean, const float* rstd, void* dx, void* dweight, void* dbias,
                         int64_t rows, int64_t cols, void* workspace, cudaStream_t stream);

// y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps); weight null = 1; rstd may be null.
void rms_norm(DType dtype, const void* x, const void* weight, double eps, void* y, float* rstd,
              int64_t rows, int64_t cols, cudaStream_t stream);

// dx = rstd * (g - xhat * mean(g * xhat)), g = dy * weight, xhat = x * rstd; dweight = sum over
// rows of dy * xhat (null: not computed), deterministic as above.
void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight,
                       const float* rstd, void* dx, void* dweight, int64_t rows, int64_t cols,
                       void* workspace, cudaStream_t stream);

}  // namespace tessel::kernels::cuda
