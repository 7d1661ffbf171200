// SPDX-License-Identifier: Apache-2.0
// STUB: replaced by the real kernels.
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels {

void CpuBackend::gemm(const GemmDesc& desc, const Tensor& a, const Tensor& b, Tensor& c) {
  TESSEL_FAIL("cpu gemm: not implemented yet");
}

}  // namespace tessel::kernels
