// SPDX-License-Identifier: Apache-2.0
// The CUDA backend of a device, for backend_for (no CUDA headers). In a build without CUDA, and
// on a machine without a visible device, it throws the Error that says so.
#pragma once

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

Backend& cuda_backend(int device);

// CudaBackend::supports: whether the CUDA backend runs `op` on `dtype` (every device alike).
bool cuda_supports(Op op, DType dtype);

}  // namespace tessel::kernels
