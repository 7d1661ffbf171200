// SPDX-License-Identifier: Apache-2.0
// What the CPU backend supports, and its singleton.
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels {

bool CpuBackend::supports(Op op, DType dtype) const {
  // Every kernel runs in f32 and f64 (f64 is what the finite-difference gradient checks use).
  return dtype == DType::F32 || dtype == DType::F64;
}

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace tessel::kernels
