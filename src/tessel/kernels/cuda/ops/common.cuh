// SPDX-License-Identifier: Apache-2.0
// What every CUDA op kernel shares (device code, private to cuda/ops): loads and stores of f32,
// bf16 and f16 through f32 (the 16-bit formats are storage only: arithmetic and accumulation run
// in f32, as on the CPU; rounding uses core/half_bits.h, the CPU's bits), dispatch from DType,
// launch checks and deterministic warp / block reductions (a fixed tree, so a result does not
// depend on scheduling).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/core/half_bits.h"

namespace tessel::kernels::cuda::detail {

enum class Storage { F32, BF16, F16 };

template <Storage S>
using StorageTag = std::integral_constant<Storage, S>;

template <Storage S>
__device__ __forceinline__ float load(const void* p, int64_t i) {
  if constexpr (S == Storage::F32)
    return static_cast<const float*>(p)[i];
  else if constexpr (S == Storage::BF16)
    return hd::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  else
    return hd::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

template <Storage S>
__device__ __forceinline__ void store(void* p, int64_t i, float v) {
  if constexpr (S == Storage::F32)
    static_cast<float*>(p)[i] = v;
  else if constexpr (S == Storage::BF16)
    static_cast<uint16_t*>(p)[i] = hd::f32_to_bf16(v);
  else
    static_cast<uint16_t*>(p)[i] = hd::f32_to_f16(v);
}

inline Storage storage_of(DType dtype, const char* op) {
  switch (dtype) {
    case DType::F32:
      return Storage::F32;
    case DType::BF16:
      return Storage::BF16;
    case DType::F16:
      return Storage::F16;
    default:
      break;
  }
  TESSEL_FAIL(op, ": the CUDA kernels take f32, bf16 or f16, got ", dtype_name(dtype));
}

// Calls fn(StorageTag<S>{}) for dtype's storage.
template <typename Fn>
void dispatch(DType dtype, const char* op, Fn&& fn) {
  switch (storage_of(dtype, op)) {
    case Storage::F32:
      return fn(StorageTag<Storage::F32>{});
    case Storage::BF16:
      return fn(StorageTag<Storage::BF16>{});
    case Storage::F16:
      return fn(StorageTag<Storage::F16>{});
  }
}

inline void check_index_dtype(DType dtype, const char* op, const char* what) {
  TESSEL_CHECK(dtype == DType::I32 || dtype == DType::I64, op, ": ", what,
               " must be i32 or i64, got ", dtype_name(dtype));
}

__device__ __forceinline__ int64_t load_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : int64_t(static_cast<const int32_t*>(p)[i]);
}

// Records an out-of-range index for the caller to check after the stream synchronises.
__device__ __forceinline__ void flag_error(int* error) {
  if (error != nullptr) atomicExch(error, 1);
}

inline void check_launch(const char* op) {
  const cudaError_t e = cudaGetLastError();
  TESSEL_CHECK(e == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(e));
}

inline void check_cuda(cudaError_t e, const char* op, const char* what) {
  TESSEL_CHECK(e == cudaSuccess, op, ": ", what, " failed: ", cudaGetErrorString(e));
}

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items (at least one, at most 2^20).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  return unsigned(std::clamp<int64_t>((n + threads - 1) / threads, 1, int64_t(1) << 20));
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {  // NaN-propagating
  __device__ float operator()(float a, float b) const { return (a > b || a != a) ? a : b; }
};
struct MinOp {
  __device__ float operator()(float a, float b) const { return (a < b || a != a) ? a : b; }
};

// Reduces v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. Callable repeatedly in one kernel.
template <typename T, typename Op>
__device__ T block_all_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // the previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T r = lane < int(blockDim.x >> 5) ? partial[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) r = op(r, __shfl_xor_sync(0xffffffffu, r, o));
  return r;
}

}  // namespace tessel::kernels::cuda::detail
