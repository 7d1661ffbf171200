// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels {

void CpuBackend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
             const AdamWParams& params) {
  TESSEL_FAIL("cpu adamw: not implemented yet");
}

}  // namespace tessel::kernels
