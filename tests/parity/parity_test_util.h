// SPDX-License-Identifier: Apache-2.0
// Comparisons shared by the PyTorch parity tests (GPT-2, LLaMA).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "tessel/tensor/tensor.h"

namespace tessel::test {

// max |got - want| and max |want| over all elements.
inline std::pair<double, double> max_diff(const Tensor& got, const Tensor& want) {
  auto a = got.to_vector<double>(), b = want.to_vector<double>();
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return {diff, scale};
}

}  // namespace tessel::test
