// SPDX-License-Identifier: Apache-2.0
// CUDA launcher for Backend::convert between f32, bf16 and f16 on device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels::cuda {

// dst[i] = src[i] in dst_dtype for i < n; narrowing rounds to nearest even with core/half_bits.h,
// so the bits equal the CPU's conversion. Equal dtypes copy.
void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n,
             cudaStream_t stream);

}  // namespace tessel::kernels::cuda
