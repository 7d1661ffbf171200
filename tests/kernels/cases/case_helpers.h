// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the elementwise / reduction / row-wise case families: name tags for
// shapes and dtypes, the floating dtypes every family runs and the tolerance each case picks.
#pragma once

#include <algorithm>
#include <string>

#include "cases.h"

namespace tessel::testing::case_helpers {

// "7x13" for [7, 13].
inline std::string shape_str(const Shape& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s.empty() ? "scalar" : s;
}

inline std::string dtype_str(DType dtype) {
  return std::string(dtype_name(dtype));
}

// The floating dtypes every family runs: bf16 and f16 are stored in 16 bits and computed in f32.
inline constexpr DType kCaseDTypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16};

// Kernels with 16-bit operands compute in f32 and round each output once: at most half an ulp,
// 2^-8 (bf16) or 2^-11 (f16) relative, squared 1.5e-5 / 2.4e-7. Backward kernels that read a
// saved output (sigmoid, tanh, exp: y = f(x) rounded to 16 bits) see a second rounding that the
// reference, given the same rounded y, still amplifies; the bounds allow for both, and stay two
// to three orders of magnitude below what a wrong formula or a dropped term gives.
inline constexpr double kBf16Nmse = 1e-4, kF16Nmse = 2e-6;

inline double tolerance(DType dtype, double f32, double f64) {
  if (dtype == DType::BF16) return std::max(f32, kBf16Nmse);
  if (dtype == DType::F16) return std::max(f32, kF16Nmse);
  return dtype == DType::F64 ? f64 : f32;
}

inline double element_bytes(DType dtype, double elements) {
  return elements * double(dtype_size(dtype));
}

}  // namespace tessel::testing::case_helpers
