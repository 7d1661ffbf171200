// SPDX-License-Identifier: Apache-2.0
// Reference GEMM: the textbook triple loop in double, straight from the GemmDesc definition.
#include "tessel/kernels/cpu/gemm_check.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::gemm(const GemmDesc& d, const Tensor& a, const Tensor& b, Tensor& c) {
  check_gemm("gemm", d, a, b, c);
  TESSEL_CHECK(c.dtype() == DType::F64, "reference gemm: f64 only, got ", dtype_name(c.dtype()));
  const double* pa = a.data<double>();
  const double* pb = b.data<double>();
  double* pc = c.data<double>();
  for (int64_t bt = 0; bt < d.batch; ++bt) {
    const double* ab = pa + bt * d.stride_a;
    const double* bb = pb + bt * d.stride_b;
    double* cb = pc + bt * d.stride_c;
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < d.k; ++p) {
          double av = d.trans_a ? ab[p * d.lda + i] : ab[i * d.lda + p];
          double bv = d.trans_b ? bb[j * d.ldb + p] : bb[p * d.ldb + j];
          acc += av * bv;
        }
        double& out = cb[i * d.ldc + j];
        // As in BLAS, beta == 0 means C is not read (it may hold NaN).
        out = d.alpha * acc + (d.beta == 0 ? 0.0 : d.beta * out);
      }
    }
  }
}

}  // namespace tessel::kernels
