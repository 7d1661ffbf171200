// SPDX-License-Identifier: Apache-2.0
// CUDA casts: a grid-stride loop through f32 with the shared rounding of core/half_bits.h.
#include "tessel/kernels/cuda/ops/cast.h"
#include "tessel/kernels/cuda/ops/common.cuh"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

template <Storage From, Storage To>
__global__ void convert_kernel(const void* src, void* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store<To>(dst, i, load<From>(src, i));
}

}  // namespace

void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n,
             cudaStream_t stream) {
  TESSEL_CHECK(n >= 0, "convert: negative element count ", n);
  if (n == 0) return;
  TESSEL_CHECK(src != nullptr && dst != nullptr, "convert: null src or dst");
  if (src_dtype == dst_dtype) {
    if (src != dst)
      check_cuda(cudaMemcpyAsync(dst, src, size_t(n) * dtype_size(src_dtype),
                                 cudaMemcpyDeviceToDevice, stream),
                 "convert", "cudaMemcpyAsync");
    return;
  }
  dispatch(src_dtype, "convert", [&](auto from) {
    dispatch(dst_dtype, "convert", [&](auto to) {
      convert_kernel<decltype(from)::value, decltype(to)::value>
          <<<grid_for(n), kThreads, 0, stream>>>(src, dst, n);
    });
  });
  check_launch("convert");
}

}  // namespace tessel::kernels::cuda
