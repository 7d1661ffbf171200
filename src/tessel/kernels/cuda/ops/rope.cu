// SPDX-License-Identifier: Apache-2.0
// CUDA rotary position embedding (Su et al. 2021, RoFormer; Hugging Face's rotate_half layout):
// one thread per rotated pair (token, head, i < dim / 2), which reads both elements of its pair
// before writing them, so the rotation can run in place.
#include "tessel/kernels/cuda/ops/common.cuh"
#include "tessel/kernels/cuda/ops/rope.h"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

template <Storage S>
__global__ void rope_kernel(const void* x, const float* cos, const float* sin,
                            const void* positions, bool i64, bool inverse, void* out,
                            int64_t tokens, int64_t heads, int64_t dim, int64_t table_rows,
                            int* error) {
  const int64_t half = dim / 2, per_token = heads * half;
  const int64_t total = tokens * per_token;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t token = e / per_token;
    const int64_t rest = e - token * per_token;
    const int64_t h = rest / half, i = rest - h * half;
    const int64_t p = load_index(positions, i64, token);
    if (p < 0 || p >= table_rows) {
      if (rest == 0) flag_error(error);
      continue;
    }
    const float c = cos[p * half + i], s = inverse ? -sin[p * half + i] : sin[p * half + i];
    const int64_t i1 = (token * heads + h) * dim + i, i2 = i1 + half;
    const float a = load<S>(x, i1), b = load<S>(x, i2);
    store<S>(out, i1, a * c - b * s);
    store<S>(out, i2, b * c + a * s);
  }
}

}  // namespace

void rope(DType dtype, const void* x, const float* cos, const float* sin, DType position_dtype,
          const void* positions, bool inverse, void* out, int64_t batch, int64_t seq, int64_t heads,
          int64_t dim, int64_t table_rows, int* error, cudaStream_t stream) {
  TESSEL_CHECK(batch >= 0 && seq >= 0 && heads >= 0 && dim > 0 && dim % 2 == 0 && table_rows >= 0,
               "rope: bad shape [", batch, ", ", seq, ", ", heads, ", ", dim, "] (dim even) with ",
               table_rows, " table rows");
  storage_of(dtype, "rope");
  check_index_dtype(position_dtype, "rope", "positions");
  const int64_t tokens = batch * seq;
  if (tokens == 0 || heads == 0) return;
  TESSEL_CHECK(x && cos && sin && positions && out, "rope: null pointer");
  dispatch(dtype, "rope", [&](auto tag) {
    rope_kernel<decltype(tag)::value><<<grid_for(tokens * heads * dim / 2), kThreads, 0, stream>>>(
        x, cos, sin, positions, position_dtype == DType::I64, inverse, out, tokens, heads, dim,
        table_rows, error);
  });
  check_launch("rope");
}

}  // namespace tessel::kernels::cuda
