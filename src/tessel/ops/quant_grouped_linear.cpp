// SPDX-License-Identifier: Apache-2.0
// quant_grouped_linear (quant_grouped_linear.h): one quant_matmul_rows per group that has rows,
// over that group's [out, row bytes] slice of the stacked blocks.
#include "tessel/ops/quant_grouped_linear.h"

#include "tessel/ops/common.h"
#include "tessel/ops/quant_linear.h"

namespace tessel::ops {

Tensor quant_grouped_linear(const Tensor& x, kernels::quant::QuantType type, const Tensor& weight,
                            int64_t in_features, const Tensor& offsets) {
  const char* op = "quant_grouped_linear";
  const std::string type_name(kernels::quant::quant_type_name(type));
  const int64_t row_bytes = kernels::quant::row_bytes(type, in_features);
  TESSEL_CHECK(weight.defined() && weight.dtype() == DType::I8 && weight.ndim() == 3 &&
                   weight.size(2) == row_bytes,
               op, ": weight must hold the raw ", type_name,
               " blocks of each group as i8 [groups, ", "out, ", row_bytes, "] (", in_features,
               " weights a row), got ",
               weight.defined() ? detail::describe(weight) : std::string("undefined"));
  detail::check_float(x, op, "x", kernels::Op::QuantMatmul);
  TESSEL_CHECK(x.ndim() == 2 && x.size(1) == in_features, op, ": x ", detail::describe(x),
               " must be [rows, ", in_features, "]");
  TESSEL_CHECK(!autograd::needs_grad({x}), op, ": x ", detail::describe(x),
               " needs a gradient, but a ", type_name,
               " expert stack is inference-only (train the f32, f16 or bf16 model and quantize it "
               "afterwards)");
  const int64_t groups = weight.size(0), out = weight.size(1), rows = x.size(0);
  detail::check_group_offsets(offsets, groups, rows, weight, op);
  const int64_t* o = offsets.data<int64_t>();
  Tensor y = empty({rows, out}, x.dtype(), x.device());
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n = o[g + 1] - o[g];
    if (n == 0) continue;  // an expert no row chose: its blocks are not read
    Tensor yg = y.narrow(0, o[g], n);
    quant_matmul_rows(type, x.narrow(0, o[g], n), weight.narrow(0, g, 1).reshape({out, row_bytes}),
                      yg);
  }
  return y;
}

}  // namespace tessel::ops
