// SPDX-License-Identifier: Apache-2.0
// Validation of a grouped GEMM (backend.h, GroupedGemmDesc) against its operands and group
// offsets, shared by the CPU and the reference backends so that both refuse the same calls with
// the same messages before anything is written.
#pragma once

#include <cstdint>

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

// Checks shapes, dtypes and offsets; returns the number of groups G.
inline int64_t check_grouped_gemm(const GroupedGemmDesc& d, const Tensor& a, const Tensor& b,
                                  const Tensor& offsets, const Tensor& c) {
  TESSEL_CHECK(a.defined() && b.defined() && c.defined() && offsets.defined(),
               "grouped_gemm: a, b, c and offsets must all be defined");
  TESSEL_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), "grouped_gemm: dtypes differ: a ",
               dtype_name(a.dtype()), ", b ", dtype_name(b.dtype()), ", c ", dtype_name(c.dtype()));
  TESSEL_CHECK(offsets.dtype() == DType::I64 && offsets.ndim() == 1 && offsets.numel() >= 1,
               "grouped_gemm: offsets must be i64 [groups + 1], got ", dtype_name(offsets.dtype()),
               " ", offsets.shape().str());
  TESSEL_CHECK(a.ndim() == 2, "grouped_gemm: a must be 2-D [rows, k], got ", a.shape().str());
  const int64_t groups = offsets.numel() - 1, rows = a.size(0);
  if (d.weight_grad) {
    TESSEL_CHECK(b.ndim() == 2 && b.size(0) == rows, "grouped_gemm (weight form): b ",
                 b.shape().str(), " must be 2-D with a's ", rows, " rows");
    TESSEL_CHECK(
        c.ndim() == 3 && c.size(0) == groups && c.size(1) == a.size(1) && c.size(2) == b.size(1),
        "grouped_gemm (weight form): c ", c.shape().str(), " must be [", groups, ", ", a.size(1),
        ", ", b.size(1), "]");
  } else {
    TESSEL_CHECK(b.ndim() == 3 && b.size(0) == groups, "grouped_gemm: b ", b.shape().str(),
                 " must be [", groups, ", ", d.trans_b ? "n, k" : "k, n", "] for ", groups,
                 " groups");
    const int64_t k = d.trans_b ? b.size(2) : b.size(1), n = d.trans_b ? b.size(1) : b.size(2);
    TESSEL_CHECK(k == a.size(1), "grouped_gemm: a ", a.shape().str(), " has k = ", a.size(1),
                 ", b ", b.shape().str(), " (trans_b ", d.trans_b, ") has k = ", k);
    TESSEL_CHECK(c.ndim() == 2 && c.size(0) == rows && c.size(1) == n, "grouped_gemm: c ",
                 c.shape().str(), " must be [", rows, ", ", n, "]");
  }
  const int64_t* off = offsets.data<int64_t>();
  TESSEL_CHECK(off[0] == 0 && off[groups] == rows, "grouped_gemm: offsets must run from 0 to the ",
               rows, " rows of a, got ", off[0], " .. ", off[groups]);
  for (int64_t g = 0; g < groups; ++g)
    TESSEL_CHECK(off[g] <= off[g + 1], "grouped_gemm: offsets decrease at group ", g, ": ", off[g],
                 " > ", off[g + 1]);
  return groups;
}

}  // namespace tessel::kernels
