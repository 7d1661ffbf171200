// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::dropout(const Tensor& x, Tensor& y, double p, uint64_t seed, uint64_t offset) {
  TESSEL_FAIL("reference dropout: not implemented yet");
}

}  // namespace tessel::kernels
