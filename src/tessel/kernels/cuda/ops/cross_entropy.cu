// SPDX-License-Identifier: Apache-2.0
// CUDA fused cross-entropy: one thread block per row. Forward: the row max, then sum(exp(x -
// max)) in f32 (fixed-tree block reductions), lse = max + log(sum), loss = lse - x[target].
// Backward recomputes softmax from the saved lse, so no [rows, vocab] probabilities are stored.
#include "tessel/kernels/cuda/ops/common.cuh"
#include "tessel/kernels/cuda/ops/cross_entropy.h"
#include "tessel/kernels/shared/elementwise_math.h"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

template <Storage S>
__global__ void cross_entropy_kernel(const void* logits, const void* targets, bool t64,
                                     int64_t ignore, float* losses, float* lse, int64_t rows,
                                     int64_t vocab, int* error) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * vocab;
    float max = -INFINITY;
    for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
      max = MaxOp{}(max, load<S>(logits, base + c));
    max = block_all_reduce(max, MaxOp{}, -INFINITY);
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
      sum += shared::exp_f32(load<S>(logits, base + c) - max);
    sum = block_all_reduce(sum, SumOp{}, 0.0f);
    if (threadIdx.x == 0) {
      const float l = max + logf(sum);
      lse[row] = l;
      const int64_t t = load_index(targets, t64, row);
      if (t == ignore) {
        losses[row] = 0.0f;
      } else if (t < 0 || t >= vocab) {
        flag_error(error);
        losses[row] = NAN;
      } else {
        losses[row] = l - load<S>(logits, base + t);
      }
    }
  }
}

template <Storage S>
__global__ void cross_entropy_backward_kernel(const void* logits, const void* targets, bool t64,
                                              const float* lse, const float* dlosses,
                                              int64_t ignore, void* dlogits, int64_t rows,
                                              int64_t vocab, int* error) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * vocab;
    const int64_t t = load_index(targets, t64, row);
    const bool bad = t != ignore && (t < 0 || t >= vocab);
    if (bad && threadIdx.x == 0) flag_error(error);
    if (t == ignore || bad) {
      for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) store<S>(dlogits, base + c, 0.0f);
      continue;
    }
    const float l = lse[row], scale = dlosses[row];
    for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
      const float d = scale * shared::exp_f32(load<S>(logits, base + c) - l);
      store<S>(dlogits, base + c, c == t ? d - scale : d);
    }
  }
}

unsigned row_grid(int64_t rows) {
  return unsigned(std::clamp<int64_t>(rows, 1, int64_t(1) << 20));
}

}  // namespace

void cross_entropy(DType dtype, const void* logits, DType target_dtype, const void* targets,
                   int64_t ignore_index, float* losses, float* lse, int64_t rows, int64_t vocab,
                   int* error, cudaStream_t stream) {
  TESSEL_CHECK(rows >= 0 && vocab > 0, "cross_entropy: bad shape [", rows, ", ", vocab, "]");
  storage_of(dtype, "cross_entropy");
  check_index_dtype(target_dtype, "cross_entropy", "targets");
  if (rows == 0) return;
  TESSEL_CHECK(logits && targets && losses && lse, "cross_entropy: null pointer");
  dispatch(dtype, "cross_entropy", [&](auto tag) {
    cross_entropy_kernel<decltype(tag)::value><<<row_grid(rows), kThreads, 0, stream>>>(
        logits, targets, target_dtype == DType::I64, ignore_index, losses, lse, rows, vocab, error);
  });
  check_launch("cross_entropy");
}

void cross_entropy_backward(DType dtype, const void* logits, DType target_dtype,
                            const void* targets, const float* lse, const float* dlosses,
                            int64_t ignore_index, void* dlogits, int64_t rows, int64_t vocab,
                            int* error, cudaStream_t stream) {
  TESSEL_CHECK(rows >= 0 && vocab > 0, "cross_entropy_backward: bad shape [", rows, ", ", vocab,
               "]");
  storage_of(dtype, "cross_entropy_backward");
  check_index_dtype(target_dtype, "cross_entropy_backward", "targets");
  if (rows == 0) return;
  TESSEL_CHECK(logits && targets && lse && dlosses && dlogits,
               "cross_entropy_backward: null pointer");
  dispatch(dtype, "cross_entropy_backward", [&](auto tag) {
    cross_entropy_backward_kernel<decltype(tag)::value><<<row_grid(rows), kThreads, 0, stream>>>(
        logits, targets, target_dtype == DType::I64, lse, dlosses, ignore_index, dlogits, rows,
        vocab, error);
  });
  check_launch("cross_entropy_backward");
}

}  // namespace tessel::kernels::cuda
