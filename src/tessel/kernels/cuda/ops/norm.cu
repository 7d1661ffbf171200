// SPDX-License-Identifier: Apache-2.0
// CUDA LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019). Forward and dx: one
// thread block per row; LayerNorm takes the mean first and then the mean of squared deviations
// (two passes), sums reduced by a fixed tree. Statistics and the per-element arithmetic run in
// f64, as the CPU kernels do: dx is a difference of nearly equal terms (exactly 0 for one-element
// LayerNorm rows; f32 with fused multiply-adds left the product's rounding error there), and
// products of f32 values are exact in f64. The rows stay bandwidth-bound on a GPU's f64 rate.
// Weight / bias gradients: each thread owns one column of one chunk of kChunkRows rows and sums it
// in row order into the workspace; a second kernel adds the chunks in order, so the result is
// deterministic.
#include <cmath>

#include "tessel/kernels/cuda/ops/common.cuh"
#include "tessel/kernels/cuda/ops/norm.h"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

constexpr int64_t kChunkRows = 64;

template <Storage S>
__device__ __forceinline__ float param(const void* p, int64_t c, float fill) {
  return p != nullptr ? load<S>(p, c) : fill;
}

template <Storage S>
__global__ void layer_norm_kernel(const void* x, const void* w, const void* b, float eps, void* y,
                                  float* mean, float* rstd, int64_t rows, int64_t cols) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    double s = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += double(load<S>(x, base + c));
    const double mu = block_all_reduce(s, SumOp{}, 0.0) / double(cols);
    double s2 = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double d = double(load<S>(x, base + c)) - mu;
      s2 += d * d;
    }
    const double var = block_all_reduce(s2, SumOp{}, 0.0) / double(cols);
    // rstd as stored (f32), so that the backward pass sees the factor the forward used.
    const float rs = float(1.0 / sqrt(var + double(eps)));
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      store<S>(
          y, base + c,
          float((double(load<S>(x, base + c)) - mu) * double(rs) * double(param<S>(w, c, 1.0f)) +
                double(param<S>(b, c, 0.0f))));
    if (threadIdx.x == 0) {
      if (mean != nullptr) mean[row] = float(mu);
      if (rstd != nullptr) rstd[row] = rs;
    }
  }
}

template <Storage S>
__global__ void layer_norm_dx_kernel(const void* dy, const void* x, const void* w,
                                     const float* mean, const float* rstd, void* dx, int64_t rows,
                                     int64_t cols) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    const double mu = mean[row], rs = rstd[row];
    double sg = 0.0, sgx = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double g = double(load<S>(dy, base + c)) * double(param<S>(w, c, 1.0f));
      sg += g;
      sgx += g * ((double(load<S>(x, base + c)) - mu) * rs);
    }
    const double mean_g = block_all_reduce(sg, SumOp{}, 0.0) / double(cols);
    const double mean_gx = block_all_reduce(sgx, SumOp{}, 0.0) / double(cols);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double g = double(load<S>(dy, base + c)) * double(param<S>(w, c, 1.0f));
      const double xhat = (double(load<S>(x, base + c)) - mu) * rs;
      store<S>(dx, base + c, float(rs * (g - mean_g - xhat * mean_gx)));
    }
  }
}

template <Storage S>
__global__ void rms_norm_kernel(const void* x, const void* w, float eps, void* y, float* rstd,
                                int64_t rows, int64_t cols) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    double sq = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double v = load<S>(x, base + c);
      sq += v * v;
    }
    const float rs =
        float(1.0 / sqrt(block_all_reduce(sq, SumOp{}, 0.0) / double(cols) + double(eps)));
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      store<S>(y, base + c,
               float(double(load<S>(x, base + c)) * double(rs) * double(param<S>(w, c, 1.0f))));
    if (threadIdx.x == 0 && rstd != nullptr) rstd[row] = rs;
  }
}

template <Storage S>
__global__ void rms_norm_dx_kernel(const void* dy, const void* x, const void* w, const float* rstd,
                                   void* dx, int64_t rows, int64_t cols) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    const double rs = rstd[row];
    double sgx = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      sgx += double(load<S>(dy, base + c)) * double(param<S>(w, c, 1.0f)) *
             (double(load<S>(x, base + c)) * rs);
    const double mean_gx = block_all_reduce(sgx, SumOp{}, 0.0) / double(cols);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double xhat = double(load<S>(x, base + c)) * rs;
      store<S>(dx, base + c,
               float(rs * (double(load<S>(dy, base + c)) * double(param<S>(w, c, 1.0f)) -
                           xhat * mean_gx)));
    }
  }
}

// partial[chunk][c] = sum over the chunk's rows of dy * xhat, and (with `with_bias`)
// partial[chunks + chunk][c] = sum of dy. mean null: RMSNorm's xhat = x * rstd.
template <Storage S>
__global__ void param_grad_chunks_kernel(const void* dy, const void* x, const float* mean,
                                         const float* rstd, bool with_bias, float* partial,
                                         int64_t rows, int64_t cols, int64_t chunks) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (c >= cols) return;
  float sw = 0.0f, sb = 0.0f;
  const int64_t end = min(rows, (chunk + 1) * kChunkRows);
  for (int64_t r = chunk * kChunkRows; r < end; ++r) {
    const float g = load<S>(dy, r * cols + c);
    const float xv = load<S>(x, r * cols + c);
    sw += g * (mean != nullptr ? (xv - mean[r]) * rstd[r] : xv * rstd[r]);
    sb += g;
  }
  partial[chunk * cols + c] = sw;
  if (with_bias) partial[(chunks + chunk) * cols + c] = sb;
}

template <Storage S>
__global__ void param_grad_total_kernel(const float* partial, void* dweight, void* dbias,
                                        int64_t cols, int64_t chunks) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    sw += partial[k * cols + c];
    if (dbias != nullptr) sb += partial[(chunks + k) * cols + c];
  }
  if (dweight != nullptr) store<S>(dweight, c, sw);
  if (dbias != nullptr) store<S>(dbias, c, sb);
}

unsigned row_grid(int64_t rows) {
  return unsigned(std::clamp<int64_t>(rows, 1, int64_t(1) << 20));
}

int64_t chunks_of(int64_t rows) {
  return (rows + kChunkRows - 1) / kChunkRows;
}

void check_shape(const char* op, int64_t rows, int64_t cols) {
  TESSEL_CHECK(rows >= 0 && cols > 0, op, ": bad shape [", rows, ", ", cols, "]");
  TESSEL_CHECK(chunks_of(rows) <= 65535, op, ": ", rows, " rows exceed ", 65535 * kChunkRows);
}

// Launches the chunk sums and their total for dweight / dbias.
template <Storage S>
void param_grads(const void* dy, const void* x, const float* mean, const float* rstd, void* dweight,
                 void* dbias, int64_t rows, int64_t cols, void* workspace, cudaStream_t stream) {
  if (dweight == nullptr && dbias == nullptr) return;
  const int64_t chunks = chunks_of(rows);
  TESSEL_CHECK(chunks == 0 || workspace != nullptr, "norm backward: null workspace");
  auto* partial = static_cast<float*>(workspace);
  const unsigned col_blocks = unsigned((cols + kThreads - 1) / kThreads);
  if (chunks > 0)
    param_grad_chunks_kernel<S><<<dim3(col_blocks, unsigned(chunks)), kThreads, 0, stream>>>(
        dy, x, mean, rstd, dbias != nullptr, partial, rows, cols, chunks);
  param_grad_total_kernel<S>
      <<<col_blocks, kThreads, 0, stream>>>(partial, dweight, dbias, cols, chunks);
}

}  // namespace

size_t norm_backward_workspace_bytes(int64_t rows, int64_t cols) {
  return size_t(2 * chunks_of(rows) * cols) * sizeof(float);
}

void layer_norm(DType dtype, const void* x, const void* weight, const void* bias, double eps,
                void* y, float* mean, float* rstd, int64_t rows, int64_t cols,
                cudaStream_t stream) {
  check_shape("layer_norm", rows, cols);
  storage_of(dtype, "layer_norm");
  if (rows == 0) return;
  TESSEL_CHECK(x != nullptr && y != nullptr, "layer_norm: null x or y");
  dispatch(dtype, "layer_norm", [&](auto tag) {
    layer_norm_kernel<decltype(tag)::value><<<row_grid(rows), kThreads, 0, stream>>>(
        x, weight, bias, float(eps), y, mean, rstd, rows, cols);
  });
  check_launch("layer_norm");
}

void layer_norm_backward(DType dtype, const void* dy, const void* x, const void* weight,
                         const float* mean, const float* rstd, void* dx, void* dweight, void* dbias,
                         int64_t rows, int64_t cols, void* workspace, cudaStream_t stream) {
  check_shape("layer_norm_backward", rows, cols);
  storage_of(dtype, "layer_norm_backward");
  TESSEL_CHECK(rows == 0 || (dy && x && mean && rstd && dx), "layer_norm_backward: null pointer");
  dispatch(dtype, "layer_norm_backward", [&](auto tag) {
    constexpr Storage S = decltype(tag)::value;
    if (rows > 0)
      layer_norm_dx_kernel<S>
          <<<row_grid(rows), kThreads, 0, stream>>>(dy, x, weight, mean, rstd, dx, rows, cols);
    param_grads<S>(dy, x, mean, rstd, dweight, dbias, rows, cols, workspace, stream);
  });
  check_launch("layer_norm_backward");
}

void rms_norm(DType dtype, const void* x, const void* weight, double eps, void* y, float* rstd,
              int64_t rows, int64_t cols, cudaStream_t stream) {
  check_shape("rms_norm", rows, cols);
  storage_of(dtype, "rms_norm");
  if (rows == 0) return;
  TESSEL_CHECK(x != nullptr && y != nullptr, "rms_norm: null x or y");
  dispatch(dtype, "rms_norm", [&](auto tag) {
    rms_norm_kernel<decltype(tag)::value>
        <<<row_grid(rows), kThreads, 0, stream>>>(x, weight, float(eps), y, rstd, rows, cols);
  });
  check_launch("rms_norm");
}

void rms_norm_backward(DType dtype, const void* dy, const void* x, const void* weight,
                       const float* rstd, void* dx, void* dweight, int64_t rows, int64_t cols,
                       void* workspace, cudaStream_t stream) {
  check_shape("rms_norm_backward", rows, cols);
  storage_of(dtype, "rms_norm_backward");
  TESSEL_CHECK(rows == 0 || (dy && x && rstd && dx), "rms_norm_backward: null pointer");
  dispatch(dtype, "rms_norm_backward", [&](auto tag) {
    constexpr Storage S = decltype(tag)::value;
    if (rows > 0)
      rms_norm_dx_kernel<S>
          <<<row_grid(rows), kThreads, 0, stream>>>(dy, x, weight, rstd, dx, rows, cols);
    param_grads<S>(dy, x, nullptr, rstd, dweight, nullptr, rows, cols, workspace, stream);
  });
  check_launch("rms_norm_backward");
}

}  // namespace tessel::kernels::cuda
