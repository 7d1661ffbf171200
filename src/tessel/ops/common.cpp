// SPDX-License-Identifier: Apache-2.0
// Shared checks and broadcasting helpers of the op families.
// Broadcast backward passes reduce with the backend's reduce kernel (keepdim form).
#include "tessel/ops/common.h"

#include <algorithm>
#include <sstream>

namespace tessel::ops::detail {

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream out;
  out << t.shape() << " " << dtype_name(t.dtype());
  return out.str();
}

void check_float(const Tensor& t, std::string_view op, std::string_view what, kernels::Op kernel) {
  TESSEL_CHECK(t.defined(), op, ": ", what, " is undefined");
  TESSEL_CHECK(backend(t).supports(kernel, t.dtype()), op, ": ", what, " ", describe(t),
               " has a dtype the ", backend(t).name(), " backend does not support for ",
               kernels::op_name(kernel),
               " (the cpu backend runs f32, f64, bf16 and f16; AdamW f32 and f64)");
}

void check_group_offsets(const Tensor& offsets, int64_t groups, int64_t rows, const Tensor& weight,
                         std::string_view op) {
  TESSEL_CHECK(offsets.defined() && offsets.dtype() == DType::I64 && offsets.ndim() == 1 &&
                   offsets.numel() == groups + 1,
               op, ": offsets must be i64 [", groups + 1, "] for weight ", describe(weight),
               ", got ", offsets.defined() ? describe(offsets) : std::string("none"));
  if (offsets.device().is_meta()) return;  // a shape-only trace: no values to check
  const int64_t* o = offsets.data<int64_t>();
  TESSEL_CHECK(o[0] == 0 && o[groups] == rows, op, ": offsets must run from 0 to the ", rows,
               " rows of x, got ", o[0], " .. ", o[groups]);
  for (int64_t g = 0; g < groups; ++g)
    TESSEL_CHECK(o[g] <= o[g + 1], op, ": offsets decrease at group ", g, ": ", o[g], " > ",
                 o[g + 1]);
}

void check_same_kind(const Tensor& a, std::string_view a_name, const Tensor& b,
                     std::string_view b_name, std::string_view op) {
  TESSEL_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a_name, " ", describe(a), " vs ",
               b_name, " ", describe(b));
  TESSEL_CHECK(a.device() == b.device(), op, ": device mismatch: ", a_name, " on ",
               a.device().str(), " vs ", b_name, " on ", b.device().str());
}

Shape broadcast_shape(const Shape& a, const Shape& b, std::string_view op) {
  int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    TESSEL_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                 " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

std::vector<int> reduce_dims(const Shape& shape, const std::vector<int>& dims,
                             std::string_view op) {
  std::vector<int> out;
  if (dims.empty()) {
    for (int i = 0; i < shape.ndim(); ++i) out.push_back(i);
    return out;
  }
  for (int d : dims) {
    TESSEL_CHECK(d >= -shape.ndim() && d < shape.ndim(), op, ": dim ", d,
                 " out of range for shape ", shape);
    out.push_back(d < 0 ? d + shape.ndim() : d);
  }
  std::sort(out.begin(), out.end());
  TESSEL_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": a dim is repeated ",
               "in the reduction over shape ", shape);
  return out;
}

Shape keepdim_shape(const Shape& shape, const std::vector<int>& dims) {
  Shape s = shape;
  for (int d : dims) s[d] = 1;
  return s;
}

Tensor unary_raw(kernels::UnaryOp op, const Tensor& x, double alpha) {
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  backend(x).unary(op, x, y, alpha);
  return y;
}

Tensor binary_raw(kernels::BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out =
      empty(broadcast_shape(a.shape(), b.shape(), kernels::binary_name(op)), a.dtype(), a.device());
  backend(a).binary(op, a, b, out);
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  int lead = g.ndim() - shape.ndim();
  TESSEL_CHECK(lead >= 0, "sum_to: gradient ", g.shape(), " has fewer dims than ", shape);
  std::vector<int> dims;
  for (int i = 0; i < g.ndim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.size(i) != 1)) dims.push_back(i);
  if (dims.empty()) return g.reshape(shape);
  Tensor out = empty(keepdim_shape(g.shape(), dims), g.dtype(), g.device());
  backend(g).reduce(kernels::ReduceOp::Sum, g, dims, out);
  return out.reshape(shape);
}

Tensor expand_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  // Adding zeros that span only the expanded dims broadcasts g without an extra full-size buffer.
  Shape zero_shape = shape;
  for (int i = 0; i < shape.ndim(); ++i)
    if (i >= shape.ndim() - g.ndim() && g.size(i - (shape.ndim() - g.ndim())) == shape[i])
      zero_shape[i] = 1;
  return binary_raw(kernels::BinaryOp::Add, g, zeros(zero_shape, g.dtype(), g.device()));
}

}  // namespace tessel::ops::detail
