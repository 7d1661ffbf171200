// SPDX-License-Identifier: Apache-2.0
// CUDA launcher for a multi-tensor AdamW step (Backend::adamw over many tensors in few launches).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "tessel/kernels/backend.h"

namespace tessel::kernels::cuda {

// One parameter of the step: f32 master weights, gradient and moments in device memory, numel
// elements each. `decay`: whether params.weight_decay applies (adamw_decays(shape) in the usual
// recipe); 0 is used otherwise.
struct AdamWTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t numel = 0;
  bool decay = true;
};

// One decoupled-weight-decay Adam step (Loshchilov & Hutter 2019) on every tensor, in place, with
// the CPU kernel's formula and bias correction (kernels/shared/elementwise_math.h: constants in
// double on the host, the update in f32). Tensors go 32 per launch.
void adamw(std::span<const AdamWTensor> tensors, const AdamWParams& params, cudaStream_t stream);

}  // namespace tessel::kernels::cuda
