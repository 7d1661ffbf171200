// SPDX-License-Identifier: Apache-2.0
// CUDA multi-tensor AdamW: up to 32 tensors per launch in a by-value table (the multi-tensor
// apply of NVIDIA Apex); blockIdx.y picks the tensor, a grid-stride loop over x covers it. Each
// element's update is kernels/shared/elementwise_math.h's adamw_update, which the CPU tests check.
#include <vector>

#include "tessel/kernels/cuda/ops/adamw.h"
#include "tessel/kernels/cuda/ops/common.cuh"
#include "tessel/kernels/shared/elementwise_math.h"

namespace tessel::kernels::cuda {

namespace {

using namespace detail;

constexpr int kTableSize = 32;

struct AdamWTable {
  float* param[kTableSize];
  const float* grad[kTableSize];
  float* m[kTableSize];
  float* v[kTableSize];
  int64_t numel[kTableSize];
  shared::AdamWConstants k[2];  // [0]: without weight decay, [1]: with
  bool decay[kTableSize];
};

__global__ void adamw_kernel(AdamWTable t) {
  const int j = blockIdx.y;
  const shared::AdamWConstants k = t.k[t.decay[j] ? 1 : 0];
  float* p = t.param[j];
  const float* g = t.grad[j];
  float* m = t.m[j];
  float* v = t.v[j];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < t.numel[j];
       i += int64_t(gridDim.x) * blockDim.x) {
    float mi = m[i], vi = v[i];
    p[i] = shared::adamw_update(k, p[i], g[i], mi, vi);
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adamw(std::span<const AdamWTensor> tensors, const AdamWParams& params, cudaStream_t stream) {
  check_adamw_hyperparameters("adamw", params.beta1, params.beta2, params.eps, params.weight_decay);
  TESSEL_CHECK(params.step >= 1, "adamw: step must be >= 1 (1-based), got ", params.step);
  for (size_t start = 0; start < tensors.size(); start += kTableSize) {
    AdamWTable t{};
    t.k[0] = shared::adamw_constants(params, 0.0);
    t.k[1] = shared::adamw_constants(params, params.weight_decay);
    const int count = int(std::min<size_t>(kTableSize, tensors.size() - start));
    int64_t largest = 0;
    for (int j = 0; j < count; ++j) {
      const AdamWTensor& x = tensors[start + size_t(j)];
      TESSEL_CHECK(x.numel >= 0 && (x.numel == 0 || (x.param && x.grad && x.m && x.v)),
                   "adamw: tensor ", start + size_t(j), " of ", x.numel,
                   " elements has a null pointer");
      t.param[j] = x.param;
      t.grad[j] = x.grad;
      t.m[j] = x.m;
      t.v[j] = x.v;
      t.numel[j] = x.numel;
      t.decay[j] = x.decay;
      largest = std::max(largest, x.numel);
    }
    if (largest == 0) continue;
    const unsigned blocks = unsigned(std::min<int64_t>((largest + kThreads - 1) / kThreads, 1024));
    adamw_kernel<<<dim3(blocks, unsigned(count)), kThreads, 0, stream>>>(t);
    check_launch("adamw");
  }
}

}  // namespace tessel::kernels::cuda
