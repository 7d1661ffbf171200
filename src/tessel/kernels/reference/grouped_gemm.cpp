// SPDX-License-Identifier: Apache-2.0
// Reference grouped GEMM: for every row, the plain dot products with its group's matrix, in double,
// straight from the definition in backend.h.
#include "tessel/kernels/cpu/grouped_gemm_check.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::grouped_gemm(const GroupedGemmDesc& d, const Tensor& a, const Tensor& b,
                                    const Tensor& offsets, Tensor& c) {
  const int64_t groups = check_grouped_gemm(d, a, b, offsets, c);
  TESSEL_CHECK(c.dtype() == DType::F64, "reference grouped_gemm: f64 only, got ",
               dtype_name(c.dtype()));
  const int64_t* off = offsets.data<int64_t>();
  const double* pa = a.data<double>();
  const double* pb = b.data<double>();
  double* pc = c.data<double>();
  if (d.weight_grad) {
    const int64_t p_dim = a.size(1), q_dim = b.size(1);
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t p = 0; p < p_dim; ++p)
        for (int64_t q = 0; q < q_dim; ++q) {
          double acc = 0;
          for (int64_t r = off[g]; r < off[g + 1]; ++r)
            acc += pa[r * p_dim + p] * pb[r * q_dim + q];
          pc[(g * p_dim + p) * q_dim + q] = acc;
        }
    return;
  }
  const int64_t k_dim = a.size(1), n_dim = c.size(1);
  for (int64_t g = 0; g < groups; ++g) {
    const double* w = pb + g * k_dim * n_dim;
    for (int64_t r = off[g]; r < off[g + 1]; ++r)
      for (int64_t n = 0; n < n_dim; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < k_dim; ++k)
          acc += pa[r * k_dim + k] * (d.trans_b ? w[n * k_dim + k] : w[k * n_dim + n]);
        pc[r * n_dim + n] = acc;
      }
  }
}

}  // namespace tessel::kernels
