// SPDX-License-Identifier: Apache-2.0
// CUDA launchers for Backend::reduce and Backend::square_sums on device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "tessel/core/dtype.h"
#include "tessel/kernels/backend.h"

namespace tessel::kernels::cuda {

// Reduces x (contiguous, `shape`, at most 8 dims) over `dims` (distinct, in range) into out, which
// holds x's shape with those dims set to 1. Sum / Mean accumulate in f32; Max / Min propagate NaN.
// x and out share `dtype`.
void reduce(ReduceOp op, DType dtype, const void* x, std::span<const int64_t> shape,
            std::span<const int> dims, void* out, cudaStream_t stream);

// One tensor of a square_sums call: device data of `dtype` (f32, bf16, f16), numel elements.
struct SquareSumInput {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t numel = 0;
};

// Device scratch square_sums needs for these inputs (one double per kSquareSumBlock block).
size_t square_sums_workspace_bytes(std::span<const SquareSumInput> xs);

// out[i] = sum_j xs[i][j]^2 in f64 (out: device memory, xs.size() doubles). Each tensor is summed
// per block of kSquareSumBlock elements (a fixed tree inside the block), the blocks added in
// order: the result is the same on every run and every GPU.
void square_sums(std::span<const SquareSumInput> xs, double* out, void* workspace,
                 cudaStream_t stream);

}  // namespace tessel::kernels::cuda
