// SPDX-License-Identifier: Apache-2.0
// Reference embedding gather and its scatter-add backward (dweight accumulates; repeated ids
// add up), element by element.
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  RowShape r = validate_embedding(*this, weight, ids, out);
  IndexView id(ids);
  for (int64_t n = 0; n < r.rows; ++n)
    for (int64_t c = 0; c < r.cols; ++c)
      out.data<double>()[n * r.cols + c] = weight.data<double>()[id[n] * r.cols + c];
}

void ReferenceBackend::embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) {
  RowShape r = validate_embedding_backward(*this, dout, ids, dweight);
  IndexView id(ids);
  for (int64_t n = 0; n < r.rows; ++n)
    for (int64_t c = 0; c < r.cols; ++c)
      dweight.data<double>()[id[n] * r.cols + c] += dout.data<double>()[n * r.cols + c];
}

}  // namespace tessel::kernels
