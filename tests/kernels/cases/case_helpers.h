// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the elementwise / reduction / row-wise case families: name tags for
// shapes and dtypes, and the tolerance pair (f32, f64) every case picks from.
#pragma once

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

inline double tolerance(DType dtype, double f32, double f64) {
  return dtype == DType::F64 ? f64 : f32;
}

inline double element_bytes(DType dtype, double elements) {
  return elements * double(dtype_size(dtype));
}

}  // namespace tessel::testing::case_helpers
