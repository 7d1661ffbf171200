// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels {

void CpuBackend::reduce(ReduceOp op, const Tensor& x, std::span<const int> dims, Tensor& out) {
  TESSEL_FAIL("cpu reduce: not implemented yet");
}

}  // namespace tessel::kernels
