// SPDX-License-Identifier: Apache-2.0
// The fp64 check every Q8_0 product kernel passes (the VNNI/AVX2 tiles, the AMX tiles): each output
// within the rounding of its activations to int8 per 32-block, sum_g (max|x_g| / 254)
// sum_{j in g} |w_j|, plus 1e-5 sum_g max|x_g| sum_{j in g} |w_j| for the f32 arithmetic
// (docs/KERNELS.md, "Accuracy"). One copy, so the kernels are held to the same bound.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/tensor/tensor.h"

namespace tessel::kernels::testing_q8 {

// y [m, n] = x [m, k] times the Q8_0 rows `bytes` (n rows of k) transposed, checked against fp64;
// `worst_ratio` takes the largest |y - fp64| / rounding bound seen (to show the bound is not loose).
inline ::testing::AssertionResult q8_0_within_fp64_bound(const std::vector<uint8_t>& bytes,
                                                         const Tensor& x, const Tensor& y,
                                                         int64_t m, int64_t n, int64_t k,
                                                         double& worst_ratio) {
  const int64_t rb = quant::row_bytes(quant::QuantType::Q8_0, k);
  std::vector<double> wd(static_cast<size_t>(k));
  const float* xp = x.data<float>();
  for (int64_t j = 0; j < n; ++j) {
    quant::dequantize_row(quant::QuantType::Q8_0, bytes.data() + j * rb, wd.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      double want = 0, rounding = 0, arithmetic = 0;
      for (int64_t g = 0; g < k / 32; ++g) {
        double amax = 0, wsum = 0;
        for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
          want += double(xp[i * k + c]) * wd[size_t(c)];
          amax = std::max(amax, std::abs(double(xp[i * k + c])));
          wsum += std::abs(wd[size_t(c)]);
        }
        rounding += amax / 254 * wsum;
        arithmetic += amax * wsum;
      }
      const double got = y.data<float>()[i * n + j];
      if (rounding == 0) {
        if (got != 0.0)
          return ::testing::AssertionFailure() << "row " << i << " col " << j << ": got " << got
                                               << " for an all-zero product";
        continue;
      }
      if (std::abs(got - want) > rounding * (1 + 1e-4) + 1e-5 * arithmetic)
        return ::testing::AssertionFailure() << "row " << i << " col " << j << ": got " << got
                                             << " want " << want << " (rounding bound "
                                             << rounding << ")";
      worst_ratio = std::max(worst_ratio, std::abs(got - want) / rounding);
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessel::kernels::testing_q8
