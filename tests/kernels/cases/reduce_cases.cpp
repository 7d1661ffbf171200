// SPDX-License-Identifier: Apache-2.0
// Reduction cases: Sum / Mean / Max / Min over the last dim (row reduction), the first or all
// leading dims (the bias-gradient pattern), a middle dim, several non-adjacent dims, every dim
// (small, and large enough for the blocked full reduction), size-1 dims (a copy), rows of one
// element and NaN inputs; in f32, f64, bf16, f16.
#include <cmath>

#include "case_helpers.h"

namespace tessel::testing {

namespace {

using case_helpers::dtype_str;
using case_helpers::shape_str;
using kernels::ReduceOp;

struct ReduceSpec {
  std::string variant;
  Shape shape;
  std::vector<int> dims;
  bool nan = false;  // a few NaN inputs: they must reach the outputs they belong to
};

Shape keepdim_shape(const Shape& shape, const std::vector<int>& dims) {
  Shape out = shape;
  for (int d : dims) out[d] = 1;
  return out;
}

OpCase reduce_case(ReduceOp op, const ReduceSpec& s, DType dtype) {
  OpCase c;
  c.name = "reduce/" + std::string(kernels::reduce_name(op)) + "_" + s.variant + "/" +
           shape_str(s.shape) + "/" + dtype_str(dtype);
  c.op = kernels::Op::Reduce;
  c.dtype = dtype;
  Shape out_shape = keepdim_shape(s.shape, s.dims);
  c.make_inputs = [s, dtype](Generator& gen) {
    return Tensors{random_tensor(gen, s.shape, dtype)};
  };
  c.make_outputs = [out_shape](const Tensors& in) {
    return Tensors{full(out_shape, 7.0, in[0].dtype())};  // must be overwritten
  };
  std::vector<int> dims = s.dims;
  c.run = [op, dims](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.reduce(op, in[0], dims, out[0]);
  };
  // Sums accumulate in double on the CPU: only the final rounding to f32 remains.
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-28);
  c.flops = double(s.shape.numel());
  c.bytes = case_helpers::element_bytes(dtype, double(s.shape.numel() + out_shape.numel()));
  return c;
}

}  // namespace

void add_reduce_cases(std::vector<OpCase>& v) {
  const ReduceSpec kSpecs[] = {
      {"last", {7, 13}, {1}},           {"last_neg", {5, 7, 33}, {-1}},
      {"first", {7, 13}, {0}},          {"leading", {5, 7, 13}, {0, 1}},
      {"middle", {5, 7, 13}, {1}},      {"outer_inner", {5, 7, 13}, {0, 2}},
      {"mixed", {3, 5, 7, 2}, {-1, 1}}, {"all", {7, 13}, {0, 1}},
      {"vector", {257}, {0}},           {"size1", {7, 1, 13}, {1}},
      {"rows_of_1", {7, 1}, {1}},       {"single_row", {1, 33}, {1}},
      {"single_col", {33, 1}, {0}},     {"none", {7, 13}, {}},
  };
  const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};
  for (DType dt : case_helpers::kCaseDTypes) {
    for (ReduceOp op : kOps)
      for (const ReduceSpec& s : kSpecs) v.push_back(reduce_case(op, s, dt));
    // Sizes that split over threads: bias gradient of a [tokens, C] activation, row sums,
    // and a full reduction over several fixed blocks.
    v.push_back(reduce_case(ReduceOp::Sum, {"first", {1024, 769}, {0}}, dt));
    v.push_back(reduce_case(ReduceOp::Sum, {"leading", {4, 257, 768}, {0, 1}}, dt));
    v.push_back(reduce_case(ReduceOp::Max, {"last", {1024, 769}, {1}}, dt));
    v.push_back(reduce_case(ReduceOp::Mean, {"middle", {33, 257, 65}, {1}}, dt));
    v.push_back(reduce_case(ReduceOp::Sum, {"all", {257, 1025}, {0, 1}}, dt));
    v.push_back(reduce_case(ReduceOp::Min, {"all", {257, 1025}, {0, 1}}, dt));
    for (ReduceOp op : kOps) {
      v.push_back(reduce_case(op, {"nan_last", {13, 33}, {1}, true}, dt));
      v.push_back(reduce_case(op, {"nan_first", {33, 13}, {0}, true}, dt));
    }
  }
}

}  // namespace tessel::testing
