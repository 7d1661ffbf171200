// SPDX-License-Identifier: Apache-2.0
// Square-sum cases (the gradient norm's kernel): several tensors at once with odd sizes, one
// element, an empty tensor, and tensors spanning several blocks of kSquareSumBlock with a ragged
// last block; in f32, f64, bf16 and f16. The output is one f64 sum per tensor.
#include "case_helpers.h"

namespace tessel::testing {

namespace {

using case_helpers::dtype_str;

struct SquareSumSpec {
  std::string variant;
  std::vector<Shape> shapes;
};

OpCase square_sum_case(const SquareSumSpec& s, DType dtype) {
  OpCase c;
  c.name = "square_sum/" + s.variant + "/" + std::to_string(s.shapes.size()) + "_tensors/" +
           dtype_str(dtype);
  c.op = kernels::Op::SquareSum;
  c.dtype = dtype;
  c.make_inputs = [s, dtype](Generator& gen) {
    Tensors in;
    for (const Shape& shape : s.shapes) in.push_back(random_tensor(gen, shape, dtype));
    return in;
  };
  const int64_t n = int64_t(s.shapes.size());
  c.make_outputs = [n](const Tensors&) {
    return Tensors{full({n}, 7.0, DType::F64)};  // must be overwritten
  };
  c.run = [n](kernels::Backend& be, const Tensors& in, Tensors& out) {
    std::vector<double> sums(size_t(n), -1.0);
    be.square_sums(in, sums);
    // copy_from: the output may live on a device (the GPU test runs the cases there).
    out[0].copy_from(from_data<double>(sums, Shape({n})));
  };
  // f64 accumulation everywhere: the inputs' own rounding is all that differs from the f64 run
  // (the harness rounds the f64 inputs of the reference from the same draws, so even that is 0).
  c.max_nmse = 1e-24;
  double elements = 0;
  for (const Shape& shape : s.shapes) elements += double(shape.numel());
  c.flops = 2 * elements;
  c.bytes = case_helpers::element_bytes(dtype, elements);
  return c;
}

}  // namespace

void add_square_sum_cases(std::vector<OpCase>& v) {
  const int64_t b = kernels::kSquareSumBlock;
  const SquareSumSpec kSpecs[] = {
      {"one", {{7, 13}}},
      {"mixed", {{7}, {1}, {13, 33}, {0}, {33}}},
      {"blocks", {{3 * b + 5}, {b}, {b - 1}, {2 * b + 7, 1}}},
      {"many_small", std::vector<Shape>(257, Shape{13})},
  };
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
    for (const SquareSumSpec& s : kSpecs) v.push_back(square_sum_case(s, dt));
}

}  // namespace tessel::testing
