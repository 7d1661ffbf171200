// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
             const AdamWParams& params) {
  TESSEL_FAIL("reference adamw: not implemented yet");
}

}  // namespace tessel::kernels
