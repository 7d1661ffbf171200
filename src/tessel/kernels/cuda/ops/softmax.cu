// SPDX-License-Identifier: Apache-2.0
// CUDA softmax / log-softmax and backward: one thread block per row (grid-stride over rows), the
// row read from global memory once per pass (max, sum, write), f32 sums reduced by a fixed tree
// (common.cuh), exp from kernels/shared/elementwise_math.h as the CPU kernel.
#include "tessel/kernels/cuda/ops/common.cuh"
#include "tessel/kernels/cuda/ops/softmax.h"
#include "tessel/kernels/shared/elementwise_math.h"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

template <Storage S>
__global__ void softmax_kernel(const void* x, void* y, int64_t rows, int64_t cols, bool log) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    float max = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      max = MaxOp{}(max, load<S>(x, base + c));
    max = block_all_reduce(max, MaxOp{}, -INFINITY);
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      sum += shared::exp_f32(load<S>(x, base + c) - max);
    sum = block_all_reduce(sum, SumOp{}, 0.0f);
    // Each thread reads only the elements it writes: y may be x.
    if (log) {
      const float log_sum = logf(sum);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        store<S>(y, base + c, (load<S>(x, base + c) - max) - log_sum);
    } else {
      const float inv = 1.0f / sum;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        store<S>(y, base + c, shared::exp_f32(load<S>(x, base + c) - max) * inv);
    }
  }
}

template <Storage S>
__global__ void softmax_backward_kernel(const void* y, const void* dy, void* dx, int64_t rows,
                                        int64_t cols, bool log) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      acc += log ? load<S>(dy, base + c) : load<S>(dy, base + c) * load<S>(y, base + c);
    acc = block_all_reduce(acc, SumOp{}, 0.0f);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float yv = load<S>(y, base + c), g = load<S>(dy, base + c);
      store<S>(dx, base + c, log ? g - shared::exp_f32(yv) * acc : yv * (g - acc));
    }
  }
}

unsigned row_grid(int64_t rows) {
  return unsigned(std::clamp<int64_t>(rows, 1, int64_t(1) << 20));
}

}  // namespace

void softmax(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, bool log,
             cudaStream_t stream) {
  TESSEL_CHECK(rows >= 0 && cols >= 0, "softmax: bad shape [", rows, ", ", cols, "]");
  storage_of(dtype, "softmax");
  if (rows == 0 || cols == 0) return;
  TESSEL_CHECK(x != nullptr && y != nullptr, "softmax: null x or y");
  dispatch(dtype, "softmax", [&](auto tag) {
    softmax_kernel<decltype(tag)::value>
        <<<row_grid(rows), kThreads, 0, stream>>>(x, y, rows, cols, log);
  });
  check_launch("softmax");
}

void softmax_backward(DType dtype, const void* y, const void* dy, void* dx, int64_t rows,
                      int64_t cols, bool log, cudaStream_t stream) {
  TESSEL_CHECK(rows >= 0 && cols >= 0, "softmax_backward: bad shape [", rows, ", ", cols, "]");
  storage_of(dtype, "softmax_backward");
  if (rows == 0 || cols == 0) return;
  TESSEL_CHECK(y != nullptr && dy != nullptr && dx != nullptr, "softmax_backward: null pointer");
  dispatch(dtype, "softmax_backward", [&](auto tag) {
    softmax_backward_kernel<decltype(tag)::value>
        <<<row_grid(rows), kThreads, 0, stream>>>(y, dy, dx, rows, cols, log);
  });
  check_launch("softmax_backward");
}

}  // namespace tessel::kernels::cuda
