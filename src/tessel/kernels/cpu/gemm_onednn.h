// SPDX-License-Identifier: Apache-2.0
// GEMM through oneDNN's matmul primitive (private to the CPU backend). Creating a primitive costs
// far more than a small product, so primitives are cached, keyed by everything in the descriptor
// that shapes the generated code.
#pragma once

#include <cstddef>

#include "tessel/kernels/backend.h"

namespace tessel::kernels::onednn {

// c = alpha * op(a) @ op(b) + beta * c for one GemmDesc (already validated; m, n, k > 0) on raw
// f32 pointers. (oneDNN 2.6 has no bf16 matmul without AVX-512: see docs/KERNELS.md.)
void gemm(const GemmDesc& desc, const float* a, const float* b, float* c);

// Number of cached primitives (for tests and diagnostics).
size_t cached_primitives();

}  // namespace tessel::kernels::onednn
