// SPDX-License-Identifier: Apache-2.0
// GEMM through oneDNN's matmul primitive (private to the CPU backend). Creating a primitive costs
// far more than a small product, so primitives are cached, keyed by everything in the descriptor
// that shapes the generated code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessel/kernels/backend.h"

namespace tessel::kernels::onednn {

// c = alpha * op(a) @ op(b) + beta * c for one GemmDesc (already validated; m, n, k > 0) on raw
// f32 pointers.
void gemm(const GemmDesc& desc, const float* a, const float* b, float* c);

// Whether this CPU multiplies bf16 natively through oneDNN (AVX-512-BF16 or AMX: oneDNN 2.6 has no
// bf16 matmul without AVX-512, and only a slow reference one without AVX-512-BF16), probed once
// by creating a primitive; `implementation` is oneDNN's name for it (e.g. "brg:avx512_core_amx").
// `tiles`: the implementation runs on AMX tiles ("amx" in its name), not on AVX-512-BF16's
// vector dot products.
struct Bf16Support {
  bool native = false;
  bool tiles = false;
  std::string implementation;
};
const Bf16Support& bf16_support();

// Which path bf16 products take: Auto, or one forced (Native is an Error where the CPU lacks it).
// Auto: native on AMX tiles; on AVX-512-BF16's vector dot products native below
// kBf16VectorNativeMaxRows rows and widened to f32 from there, where oneDNN 2.6's vector bf16
// kernel runs at 0.6-0.75x of the widened path (docs/KERNELS.md, "bf16 GEMM where the CPU has
// it"); widened where the CPU has neither. Starts as TESSEL_BF16_GEMM (auto|native|widen; unset:
// auto); tests switch it to compare the two paths.
enum class Bf16Gemm { Auto, Native, Widen };
inline constexpr int64_t kBf16VectorNativeMaxRows = 64;
void set_bf16_gemm(Bf16Gemm mode);
// Whether the next bf16 product of `rows` rows (m) runs natively.
bool bf16_gemm_native(int64_t rows = 1);

// The same product on bf16 operands and a bf16 result, accumulated in f32 (only where
// bf16_support().native).
void gemm_bf16(const GemmDesc& desc, const uint16_t* a, const uint16_t* b, uint16_t* c);

// Number of cached primitives (for tests and diagnostics).
size_t cached_primitives();

}  // namespace tessel::kernels::onednn
