// SPDX-License-Identifier: Apache-2.0
// Reference quantized matmul: each weight row dequantized exactly (in f64) and multiplied in f64.
// The CPU kernels differ from it by their f32 accumulation and, for the Q types, by rounding
// the activations to int8 per 32-element block; the harness bounds allow for both
// (tests/kernels/cases/quant_matmul_cases.cpp).
#include <vector>

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::quant_matmul(quant::QuantType type, const Tensor& x, const Tensor& w,
                                    Tensor& y) {
  const QuantMatmulShape s = validate_quant_matmul(*this, type, x, w, y);
  const double* xp = x.data<double>();
  const auto* wp = static_cast<const uint8_t*>(w.data_ptr());
  double* yp = y.data<double>();
  std::vector<double> row(size_t(s.k));
  for (int64_t j = 0; j < s.n; ++j) {
    quant::dequantize_matrix_row(type, wp, s.n, s.k, j, row.data());
    for (int64_t i = 0; i < s.m; ++i) {
      double acc = 0;
      for (int64_t c = 0; c < s.k; ++c) acc += xp[i * s.k + c] * row[size_t(c)];
      yp[i * s.n + j] = acc;
    }
  }
}

}  // namespace tessel::kernels
