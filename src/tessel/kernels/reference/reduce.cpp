// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::reduce(ReduceOp op, const Tensor& x, std::span<const int> dims, Tensor& out) {
  TESSEL_FAIL("reference reduce: not implemented yet");
}

}  // namespace tessel::kernels
