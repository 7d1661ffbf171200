// SPDX-License-Identifier: Apache-2.0
// CUDA launcher for Backend::rope (rotary position embedding, rotate_half layout) on device
// memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels::cuda {

// x and out [batch, seq, heads, dim] of `dtype` (f32, bf16, f16), dim even; cos and sin f32
// [table_rows, dim / 2]; positions i32 / i64 [batch, seq]. For each head vector with halves
// x1, x2 and c = cos[pos], s = sin[pos] (s -> -s when `inverse`, the backward):
// out1 = x1 * c - x2 * s, out2 = x2 * c + x1 * s, in f32. out may be x. A position outside
// [0, table_rows) sets *error = 1 (when non-null) and leaves that token's output unwritten.
void rope(DType dtype, const void* x, const float* cos, const float* sin, DType position_dtype,
          const void* positions, bool inverse, void* out, int64_t batch, int64_t seq, int64_t heads,
          int64_t dim, int64_t table_rows, int* error, cudaStream_t stream);

}  // namespace tessel::kernels::cuda
