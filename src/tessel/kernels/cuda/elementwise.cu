// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's own small kernels: dtype conversion and matrix scaling (elementwise_launch.h).
// Grid-stride loops over 64-bit indices: any size with a bounded grid.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "tessel/kernels/cuda/elementwise_launch.h"

namespace tessel::kernels::cuda {

namespace {

template <typename T>
__device__ double load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return double(__bfloat162float(p[i]));
  else if constexpr (std::is_same_v<T, __half>)
    return double(__half2float(p[i]));
  else
    return double(p[i]);
}

template <typename T>
__device__ void store(T* p, int64_t i, double v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    p[i] = __float2bfloat16_rn(float(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    p[i] = __float2half_rn(float(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    p[i] = T(v);
  } else {
    // <cstdint>'s limits: std::numeric_limits is host-only code.
    constexpr T lo = sizeof(T) == 1 ? T(INT8_MIN) : sizeof(T) == 4 ? T(INT32_MIN) : T(INT64_MIN);
    constexpr T hi = sizeof(T) == 1 ? T(INT8_MAX) : sizeof(T) == 4 ? T(INT32_MAX) : T(INT64_MAX);
    T out;
    if (v != v)
      out = T(0);
    else if (v <= double(lo))
      out = lo;
    else if (v >= double(hi))
      out = hi;
    else
      out = T(v);
    p[i] = out;
  }
}

template <typename S, typename D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  int64_t step = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    store(dst, i, load(src, i));
}

template <typename T>
__global__ void scale_kernel(T* c, int64_t rows, int64_t n, int64_t m, int64_t ld, int64_t stride,
                             double beta) {
  // rows = batch * m; row r is matrix r / m, row r % m.
  int64_t total = rows * n;
  int64_t step = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t r = i / n, j = i % n;
    int64_t at = (r / m) * stride + (r % m) * ld + j;
    store(c, at, beta == 0.0 ? 0.0 : beta * load(c, at));
  }
}

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < 65536 ? (b < 1 ? 1 : b) : 65536);
}

template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32:
      f(float{});
      break;
    case DType::F64:
      f(double{});
      break;
    case DType::BF16:
      f(__nv_bfloat16{});
      break;
    case DType::F16:
      f(__half{});
      break;
    case DType::I8:
      f(int8_t{});
      break;
    case DType::I32:
      f(int32_t{});
      break;
    case DType::I64:
      f(int64_t{});
      break;
  }
}

}  // namespace

cudaError_t launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                           cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  with_type(src_dtype, [&](auto s) {
    using S = decltype(s);
    with_type(dst_dtype, [&](auto d) {
      using D = decltype(d);
      convert_kernel<S, D><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const S*>(src),
                                                                   static_cast<D*>(dst), n);
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_scale_matrices(void* c, DType dtype, int64_t batch, int64_t m, int64_t n,
                                  int64_t ld, int64_t stride, double beta, cudaStream_t stream) {
  if (batch <= 0 || m <= 0 || n <= 0) return cudaSuccess;
  with_type(dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __nv_bfloat16> ||
                  std::is_same_v<T, __half>) {
      scale_kernel<T><<<blocks_for(batch * m * n), kThreads, 0, stream>>>(
          static_cast<T*>(c), batch * m, n, m, ld, stride, beta);
    }
  });
  return cudaGetLastError();
}

}  // namespace tessel::kernels::cuda
