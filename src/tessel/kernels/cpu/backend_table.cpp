// SPDX-License-Identifier: Apache-2.0
// What the CPU backend supports, and its singleton (wrapped in the profiling decorator while
// core/profile.h is switched on).
#include "tessel/core/profile.h"
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/profiled_backend.h"

namespace tessel::kernels {

bool CpuBackend::supports(Op op, DType dtype) const {
  // Every kernel runs in f32 and f64 (f64 is what the finite-difference gradient checks use).
  // bf16 / f16 are stored in 16 bits and computed in f32 (half_kernels.h); AdamW updates the f32
  // master weights only.
  if (dtype == DType::BF16 || dtype == DType::F16) return op != Op::AdamW;
  return dtype == DType::F32 || dtype == DType::F64;
}

Backend& cpu_backend() {
  static CpuBackend backend;
  if (profile::enabled()) [[unlikely]] {
    static Backend& timed = profiled(backend);
    return timed;
  }
  return backend;
}

}  // namespace tessel::kernels
