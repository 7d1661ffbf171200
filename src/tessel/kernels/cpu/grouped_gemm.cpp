// SPDX-License-Identifier: Apache-2.0
// CPU grouped GEMM: one GEMM per group over its contiguous rows (views into a, b and c, no copies),
// one group after another so that each product uses the whole thread pool through the backend's
// own gemm (oneDNN / OpenBLAS and their shape rules). An empty group costs nothing in the rows
// form and clears its matrix in the weight form.
#include <cstring>

#include "tessel/kernels/cpu/grouped_gemm_check.h"
#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

void CpuBackend::grouped_gemm(const GroupedGemmDesc& d, const Tensor& a, const Tensor& b,
                              const Tensor& offsets, Tensor& c) {
  const int64_t groups = check_grouped_gemm(d, a, b, offsets, c);
  const int64_t* off = offsets.data<int64_t>();
  if (d.weight_grad) {
    const int64_t p = a.size(1), q = b.size(1);
    Tensor c2 = c.reshape({groups, p * q});
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t rows = off[g + 1] - off[g];
      Tensor cg = c2.narrow(0, g, 1);
      if (rows == 0) {
        std::memset(cg.data_ptr(), 0, size_t(p * q) * dtype_size(c.dtype()));
        continue;
      }
      gemm(dense_gemm_desc(1, p, q, rows, true, false), a.narrow(0, off[g], rows),
           b.narrow(0, off[g], rows), cg);
    }
    return;
  }
  const int64_t k = a.size(1), n = c.size(1);
  Tensor b2 = b.reshape({groups, k * n});
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = off[g + 1] - off[g];
    if (rows == 0) continue;
    Tensor cg = c.narrow(0, off[g], rows);
    gemm(dense_gemm_desc(1, rows, n, k, false, d.trans_b), a.narrow(0, off[g], rows),
         b2.narrow(0, g, 1), cg);
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
