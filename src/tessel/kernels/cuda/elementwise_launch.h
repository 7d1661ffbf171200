// SPDX-License-Identifier: Apache-2.0
// Launchers of the CUDA backend's own small kernels (elementwise.cu): dtype conversion and the
// scaling GEMM needs when k is 0. Raw pointers and sizes; they queue work on `stream` and return.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels::cuda {

// dst[i] = src[i] in dst's dtype, as tessel::convert_elements does on the host (float -> bf16/f16
// rounds to nearest even through float; float -> int truncates, saturates, NaN -> 0).
cudaError_t launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                           cudaStream_t stream);

// c[b][i][j] *= beta for b < batch, i < m, j < n at c + b * stride + i * ld + j (floating dtypes);
// beta == 0 writes exact zeros (NaN and inf in c do not survive, as BLAS's beta = 0).
cudaError_t launch_scale_matrices(void* c, DType dtype, int64_t batch, int64_t m, int64_t n,
                                  int64_t ld, int64_t stride, double beta, cudaStream_t stream);

}  // namespace tessel::kernels::cuda
