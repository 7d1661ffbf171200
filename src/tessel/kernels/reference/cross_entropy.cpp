// SPDX-License-Identifier: Apache-2.0
// Reference softmax cross-entropy per row: loss = logsumexp(logits) - logits[target], and its
// gradient softmax - onehot scaled by the row's upstream gradient. Ignored rows give 0.
#include <cmath>

#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::cross_entropy(const Tensor& logits, const Tensor& targets,
                                     int64_t ignore_index, Tensor& losses, Tensor& lse) {
  RowShape r = validate_cross_entropy(*this, logits, targets, ignore_index, losses, lse);
  IndexView target(targets);
  for (int64_t n = 0; n < r.rows; ++n) {
    const double* row = logits.data<double>() + n * r.cols;
    double max = -INFINITY;
    for (int64_t c = 0; c < r.cols; ++c) max = std::max(max, row[c]);
    double sum = 0;
    for (int64_t c = 0; c < r.cols; ++c) sum += std::exp(row[c] - max);
    double l = max + std::log(sum);
    lse.data<double>()[n] = l;
    losses.data<double>()[n] = target[n] == ignore_index ? 0.0 : l - row[target[n]];
  }
}

void ReferenceBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                              const Tensor& lse, const Tensor& dlosses,
                                              int64_t ignore_index, Tensor& dlogits) {
  RowShape r =
      validate_cross_entropy_backward(*this, logits, targets, lse, dlosses, ignore_index, dlogits);
  IndexView target(targets);
  for (int64_t n = 0; n < r.rows; ++n) {
    const double* row = logits.data<double>() + n * r.cols;
    double* drow = dlogits.data<double>() + n * r.cols;
    bool ignored = target[n] == ignore_index;
    double scale = dlosses.data<double>()[n], l = lse.data<double>()[n];
    for (int64_t c = 0; c < r.cols; ++c) {
      double p = std::exp(row[c] - l);
      drow[c] = ignored ? 0.0 : scale * (p - (c == target[n] ? 1.0 : 0.0));
    }
  }
}

}  // namespace tessel::kernels
