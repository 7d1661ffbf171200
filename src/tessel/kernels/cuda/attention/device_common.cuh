// SPDX-License-Identifier: Apache-2.0
// Device helpers of the attention kernels (CUDA only): element conversions to and from f32, warp
// reductions, and the launch-error check that turns a CUDA error into tessel::Error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "tessel/core/error.h"

namespace tessel::kernels::cuda {

template <typename T>
__device__ __forceinline__ float to_f32(T x);
template <>
__device__ __forceinline__ float to_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

#if !defined(TESSEL_CUDA_EMULATION)
inline void check_launch(const char* kernel) {
  cudaError_t e = cudaGetLastError();
  TESSEL_CHECK(e == cudaSuccess, kernel, ": kernel launch failed: ", cudaGetErrorString(e));
}
// Grants a kernel `bytes` of dynamic shared memory (above the default 48 KiB).
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, size_t bytes, const char* what) {
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  TESSEL_CHECK(e == cudaSuccess, what, ": cannot grant ", bytes,
               " bytes of shared memory: ", cudaGetErrorString(e));
}
#else
inline void check_launch(const char*) {}
template <typename Kernel>
void allow_shared_bytes(Kernel, size_t, const char*) {}
#endif

}  // namespace tessel::kernels::cuda

// kernel<<<grid, block, shared bytes, stream>>>(args): a macro so that the CPU tests can run the
// same launch code on their warp emulation (tests/kernels/cuda/warp_emulation.h).
#if !defined(TESSEL_CUDA_EMULATION)
#define TESSEL_LAUNCH(grid, block, shared, stream, ...) __VA_ARGS__<<<grid, block, shared, stream>>>
#define TESSEL_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace tessel::kernels::cuda {}  // namespace tessel::kernels::cuda
