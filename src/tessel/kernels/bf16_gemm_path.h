// SPDX-License-Identifier: Apache-2.0
// Which path the CPU backend's bf16 products take on this machine, for the layers that model the
// backend's memory (the planner counts the f32 stand-ins a widened product allocates,
// plan/trace_recorder.h): oneDNN's native bf16 matmul where the CPU has AVX-512-BF16 or AMX
// (below kernels/cpu/gemm_onednn.h's row limit on vector dot products), otherwise the operands
// widened to f32 (kernels/cpu/half_kernels.h). Follows TESSEL_BF16_GEMM as the backend does.
#pragma once

#include <cstdint>

namespace tessel::kernels {

// Whether a bf16 GEMM of `rows` rows (GemmDesc::m) widens its operands to f32 on this CPU.
bool cpu_bf16_gemm_widens(int64_t rows);

}  // namespace tessel::kernels
