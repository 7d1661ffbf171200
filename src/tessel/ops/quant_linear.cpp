// SPDX-License-Identifier: Apache-2.0
// Quantized linear and embedding lookup (quant_linear.h): the product goes through
// Backend::quant_matmul in chunks of at most kQuantMatmulRows activation rows, each chunk reading
// the weight's blocks where they are; the lookup dequantizes only the rows it returns.
#include "tessel/ops/quant_linear.h"

#include <algorithm>

#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/row_interleave.h"
#include "tessel/ops/common.h"

namespace tessel::ops {

namespace {

using kernels::quant::QuantType;

void check_weight(QuantType type, const Tensor& weight, int64_t cols, const char* op) {
  TESSEL_CHECK(weight.defined() && weight.ndim() == 2 && weight.dtype() == DType::I8, op,
               ": weight must hold the raw ", kernels::quant::quant_type_name(type),
               " blocks as i8 [rows, row bytes], got ",
               weight.defined() ? detail::describe(weight) : std::string("undefined"));
  const int64_t row_bytes = kernels::quant::row_bytes(type, cols);
  TESSEL_CHECK(weight.size(1) == row_bytes, op, ": a ", kernels::quant::quant_type_name(type),
               " row of ", cols, " weights takes ", row_bytes, " bytes, but weight is ",
               detail::describe(weight));
}

}  // namespace

Tensor quant_linear(const Tensor& x, QuantType type, const Tensor& weight, int64_t in_features,
                    const Tensor& bias) {
  check_weight(type, weight, in_features, "quant_linear");
  detail::check_float(x, "quant_linear", "x", kernels::Op::QuantMatmul);
  TESSEL_CHECK(x.ndim() >= 1 && x.size(-1) == in_features, "quant_linear: x ", detail::describe(x),
               " must end in ", in_features, " input features");
  TESSEL_CHECK(!autograd::needs_grad({x, bias}), "quant_linear: x ", detail::describe(x),
               " needs a gradient, but a ", kernels::quant::quant_type_name(type),
               " weight is inference-only (quantized models cannot be trained: train the f32, "
               "f16 or bf16 model and quantize it afterwards)");
  const int64_t out = weight.size(0), rows = in_features > 0 ? x.numel() / in_features : 0;
  if (bias.defined())
    TESSEL_CHECK(bias.ndim() == 1 && bias.size(0) == out && bias.dtype() == x.dtype(),
                 "quant_linear: bias ", detail::describe(bias), " must be ", dtype_name(x.dtype()),
                 " [", out, "]");
  const Tensor x2 = x.reshape({rows, in_features});
  Tensor y = empty({rows, out}, x.dtype(), x.device());
  quant_matmul_rows(type, x2, weight, y);
  if (bias.defined()) detail::backend(x).binary(kernels::BinaryOp::Add, y, bias, y);
  return y.reshape(x.shape().with(-1, out));
}

void quant_matmul_rows(QuantType type, const Tensor& x, const Tensor& weight, Tensor& y) {
  kernels::Backend& backend = detail::backend(x);
  // The kernel's tested range is 1..kQuantMatmulRows rows (the tiled types:
  // kQuantMatmulTiledRows); each chunk reads the weight once.
  const int64_t rows = x.size(0);
  const QuantType plain = kernels::quant::plain_form(type);  // Q4_Kx4 tiles as Q4_K
  const bool tiled = plain == QuantType::Q8_0 || plain == QuantType::Q4_K ||
                     plain == QuantType::Q5_K || plain == QuantType::Q6_K;
  const int64_t chunk = tiled ? kQuantMatmulTiledRows : kQuantMatmulRows;
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t end = std::min(rows, r + chunk);
    Tensor yc = y.narrow(0, r, end - r);  // views: dim 0 of a contiguous matrix
    backend.quant_matmul(type, x.narrow(0, r, end - r), weight, yc);
  }
}

Tensor quant_embedding(QuantType type, const Tensor& weight, int64_t dim, const Tensor& ids) {
  check_weight(type, weight, dim, "quant_embedding");
  TESSEL_CHECK(ids.defined() && (ids.dtype() == DType::I32 || ids.dtype() == DType::I64),
               "quant_embedding: ids ", detail::describe(ids), " must be i32 or i64");
  const Tensor flat = ids.reshape({ids.numel()}).to(DType::I64);
  const int64_t num = weight.size(0);
  const auto* rows = static_cast<const uint8_t*>(weight.data_ptr());
  const int64_t* id = flat.data<int64_t>();
  Tensor out = empty({flat.numel(), dim}, DType::F32);
  float* dst = out.data<float>();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    TESSEL_CHECK(id[i] >= 0 && id[i] < num, "quant_embedding: id ", id[i], " at position ", i,
                 " outside [0, ", num, ")");
    kernels::quant::dequantize_matrix_row(type, rows, num, dim, id[i], dst + i * dim);
  }
  Shape shape = ids.shape();
  shape.push_back(dim);
  return out.reshape(shape);
}

}  // namespace tessel::ops
