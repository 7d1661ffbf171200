// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::gemm(const GemmDesc& desc, const Tensor& a, const Tensor& b, Tensor& c) {
  TESSEL_FAIL("reference gemm: not implemented yet");
}

}  // namespace tessel::kernels
