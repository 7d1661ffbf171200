// SPDX-License-Identifier: Apache-2.0
// CUDA launcher for Backend::dropout: the mask is core/philox.h's stream, the same function the
// CPU's uniform_at uses, so a (seed, offset) draw drops the same elements on both devices.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels::cuda {

// y[i] = x[i] * keep_i / (1 - p), keep_i = uniform_at(seed, offset, i) >= p, for i < n and p in
// [0, 1]; x, y device memory of `dtype` (f32, bf16, f16: the product in f32, rounded once, as
// the CPU). y may be x. Backward is the same call on dy with the same (seed, offset).
void dropout(DType dtype, const void* x, void* y, int64_t n, double p, uint64_t seed,
             uint64_t offset, cudaStream_t stream);

}  // namespace tessel::kernels::cuda
