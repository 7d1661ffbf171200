// SPDX-License-Identifier: Apache-2.0
// CUDA dropout: one thread per Philox4x32-10 block, i.e. per four consecutive stream elements
// (the block is computed once for its four words, as the CPU kernel does). The keep test is the
// integer one of the CPU kernel, bits >= ceil(p * 2^24), so no float rounding can differ.
#include "tessel/core/philox.h"
#include "tessel/kernels/cuda/ops/common.cuh"
#include "tessel/kernels/cuda/ops/dropout.h"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

template <Storage S>
__global__ void dropout_kernel(const void* x, void* y, int64_t n, uint64_t seed, uint64_t offset,
                               uint32_t threshold, float scale) {
  // Stream elements offset .. offset + n - 1 lie in Philox blocks first .. first + blocks - 1.
  const uint64_t first = offset / 4;
  const uint64_t blocks = (offset + uint64_t(n) + 3) / 4 - first;
  for (uint64_t j = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; j < blocks;
       j += uint64_t(gridDim.x) * blockDim.x) {
    const PhiloxBlock r = philox4x32_10(first + j, 0, seed);
    for (int lane = 0; lane < 4; ++lane) {
      const uint64_t s = 4 * (first + j) + uint64_t(lane);  // stream element
      if (s < offset || s - offset >= uint64_t(n)) continue;
      const int64_t i = int64_t(s - offset);
      const bool keep = (r.w[lane] >> 8) >= threshold;
      store<S>(y, i, load<S>(x, i) * (keep ? scale : 0.0f));
    }
  }
}

}  // namespace

void dropout(DType dtype, const void* x, void* y, int64_t n, double p, uint64_t seed,
             uint64_t offset, cudaStream_t stream) {
  TESSEL_CHECK(p >= 0 && p <= 1, "dropout: p must lie in [0, 1], got ", p);
  TESSEL_CHECK(n >= 0, "dropout: negative element count ", n);
  storage_of(dtype, "dropout");
  if (n == 0) return;
  TESSEL_CHECK(x != nullptr && y != nullptr, "dropout: null x or y");
  if (p == 0.0) {  // every element kept, scale 1
    if (x != y)
      check_cuda(
          cudaMemcpyAsync(y, x, size_t(n) * dtype_size(dtype), cudaMemcpyDeviceToDevice, stream),
          "dropout", "cudaMemcpyAsync");
    return;
  }
  if (p >= 1.0) {  // every element dropped: zeros, as the CPU's memset
    check_cuda(cudaMemsetAsync(y, 0, size_t(n) * dtype_size(dtype), stream), "dropout",
               "cudaMemsetAsync");
    return;
  }
  const uint32_t threshold = dropout_threshold(p);
  const float scale = float(1.0 / (1.0 - p));
  const int64_t blocks = int64_t((offset + uint64_t(n) + 3) / 4 - offset / 4);
  dispatch(dtype, "dropout", [&](auto tag) {
    dropout_kernel<decltype(tag)::value>
        <<<grid_for(blocks), kThreads, 0, stream>>>(x, y, n, seed, offset, threshold, scale);
  });
  check_launch("dropout");
}

}  // namespace tessel::kernels::cuda
