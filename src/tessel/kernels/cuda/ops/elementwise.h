// SPDX-License-Identifier: Apache-2.0
// CUDA launchers for the unary ops and their backward and the broadcasting binary ops (Backend::
// unary, unary_backward, binary). Pointers are device memory; x, y, dy, dx, a, b, out share
// `dtype` (f32, bf16 or f16: loaded as f32, computed in f32 with kernels/shared/elementwise_math.h,
// the formulas the CPU tests check, and rounded to nearest even on store). Launches are
// asynchronous on `stream`; argument errors throw tessel::Error before anything is launched.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "tessel/core/dtype.h"
#include "tessel/kernels/backend.h"

namespace tessel::kernels::cuda {

// y[i] = f(x[i]) for i < n; alpha parameterises Scale / AddScalar / Pow. y may be x.
void unary(UnaryOp op, DType dtype, const void* x, void* y, int64_t n, double alpha,
           cudaStream_t stream);

// dx[i] = dy[i] * f'(x[i]). y = f(x) is read (and must be non-null) exactly for the ops where
// unary_derivative_reads_y(op); x may then be null. dx may alias dy.
void unary_backward(UnaryOp op, DType dtype, const void* x, const void* y, const void* dy, void* dx,
                    int64_t n, double alpha, cudaStream_t stream);

// out = a (op) b with NumPy broadcasting of the shapes (at most 8 dims); out_shape must be the
// broadcast shape (checked). out may alias an input of out's shape.
void binary(BinaryOp op, DType dtype, const void* a, std::span<const int64_t> a_shape,
            const void* b, std::span<const int64_t> b_shape, void* out,
            std::span<const int64_t> out_shape, cudaStream_t stream);

}  // namespace tessel::kernels::cuda
