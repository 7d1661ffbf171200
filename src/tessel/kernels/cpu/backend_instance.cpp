// SPDX-License-Identifier: Apache-2.0
// What the CPU backend supports, and the one instance of this kernel set's backend (compiled once
// per set, like every kernel file here; kernel_set.cpp picks among them).
#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

bool CpuBackend::supports(Op op, DType dtype) const {
  // Every kernel runs in f32 and f64 (f64 is what the finite-difference gradient checks use).
  // bf16 / f16 are stored in 16 bits and computed in f32 (half_kernels.h); AdamW updates the f32
  // master weights only. The quantized matmul takes f32 activations (its weights are raw blocks).
  if (op == Op::QuantMatmul) return dtype == DType::F32;
  if (dtype == DType::BF16 || dtype == DType::F16) return op != Op::AdamW;
  return dtype == DType::F32 || dtype == DType::F64;
}

Backend& cpu_backend_instance() {
  static CpuBackend backend;
  return backend;
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
