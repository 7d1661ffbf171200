// SPDX-License-Identifier: Apache-2.0
// Reference softmax / log-softmax over the last dim and their backward, in double with the row
// maximum subtracted first.
#include <cmath>

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::softmax(const Tensor& x, Tensor& y, bool log) {
  RowShape r = validate_softmax(*this, x, y);
  for (int64_t row = 0; row < r.rows; ++row) {
    const double* xr = x.data<double>() + row * r.cols;
    double* yr = y.data<double>() + row * r.cols;
    double max = -INFINITY;
    for (int64_t c = 0; c < r.cols; ++c) max = std::max(max, xr[c]);
    double sum = 0;
    for (int64_t c = 0; c < r.cols; ++c) sum += std::exp(xr[c] - max);
    for (int64_t c = 0; c < r.cols; ++c)
      yr[c] = log ? xr[c] - max - std::log(sum) : std::exp(xr[c] - max) / sum;
  }
}

void ReferenceBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  RowShape r = validate_softmax_backward(*this, y, dy, dx);
  for (int64_t row = 0; row < r.rows; ++row) {
    const double* yr = y.data<double>() + row * r.cols;
    const double* dyr = dy.data<double>() + row * r.cols;
    double* dxr = dx.data<double>() + row * r.cols;
    if (log) {
      // y = log p: dx = dy - p * sum(dy).
      double sum = 0;
      for (int64_t c = 0; c < r.cols; ++c) sum += dyr[c];
      for (int64_t c = 0; c < r.cols; ++c) dxr[c] = dyr[c] - std::exp(yr[c]) * sum;
    } else {
      // y = p: dx = p * (dy - sum(dy * p)).
      double dot = 0;
      for (int64_t c = 0; c < r.cols; ++c) dot += dyr[c] * yr[c];
      for (int64_t c = 0; c < r.cols; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
    }
  }
}

}  // namespace tessel::kernels
