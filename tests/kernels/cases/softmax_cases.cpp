// SPDX-License-Identifier: Apache-2.0
// Softmax and log-softmax cases, forward and backward: odd row lengths, a single row, rows of one
// element, large-magnitude inputs (spread +-50 and beyond) that overflow exp without the max
// subtraction, -inf (masked) entries, 3-d inputs, a size that splits over threads; f32, f64, bf16
// and f16.
#include <cmath>

#include "case_helpers.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::testing {

namespace {

using case_helpers::dtype_str;
using case_helpers::shape_str;

struct SoftmaxSpec {
  std::string variant;
  Shape shape;
  double scale = 1;
  bool masked = false;  // every 5th element (never a whole row) is -inf, as in attention masks
};

Tensor softmax_input(Generator& gen, const SoftmaxSpec& s, DType dtype) {
  Tensor x = random_tensor(gen, s.shape, DType::F64, s.scale);
  if (s.masked) {
    double* p = x.data<double>();
    for (int64_t i = 3; i < x.numel(); i += 5) p[i] = -INFINITY;
  }
  return x.to(dtype);
}

OpCase softmax_case(const SoftmaxSpec& s, bool log, DType dtype) {
  OpCase c;
  c.name = std::string(log ? "log_softmax/" : "softmax/") + s.variant + "/" + shape_str(s.shape) +
           "/" + dtype_str(dtype);
  c.op = kernels::Op::Softmax;
  c.dtype = dtype;
  c.make_inputs = [s, dtype](Generator& gen) { return Tensors{softmax_input(gen, s, dtype)}; };
  c.make_outputs = [](const Tensors& in) { return Tensors{zeros_like(in[0])}; };
  c.run = [log](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.softmax(in[0], out[0], log);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-30);
  double n = double(s.shape.numel());
  c.flops = 5 * n;
  c.bytes = case_helpers::element_bytes(dtype, 2 * n);
  return c;
}

OpCase softmax_backward_case(const SoftmaxSpec& s, bool log, DType dtype) {
  OpCase c;
  c.name = std::string(log ? "log_softmax_backward/" : "softmax_backward/") + s.variant + "/" +
           shape_str(s.shape) + "/" + dtype_str(dtype);
  c.op = kernels::Op::SoftmaxBackward;
  c.dtype = dtype;
  c.make_inputs = [s, log, dtype](Generator& gen) {
    Tensor x = softmax_input(gen, s, DType::F64);
    Tensor y = empty(s.shape, DType::F64);
    kernels::reference_backend().softmax(x, y, log);
    return Tensors{y.to(dtype), random_tensor(gen, s.shape, dtype)};
  };
  c.make_outputs = [](const Tensors& in) { return Tensors{zeros_like(in[0])}; };
  c.run = [log](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.softmax_backward(in[0], in[1], out[0], log);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-11, 1e-28);
  double n = double(s.shape.numel());
  c.flops = 4 * n;
  c.bytes = case_helpers::element_bytes(dtype, 3 * n);
  return c;
}

}  // namespace

void add_softmax_cases(std::vector<OpCase>& v) {
  const SoftmaxSpec kSpecs[] = {
      {"basic", {7, 13}},       {"single_row", {1, 257}},     {"rows_of_1", {7, 1}},
      {"large", {13, 33}, 50},  {"huge", {7, 257}, 200},      {"3d", {3, 5, 33}, 3},
      {"wide", {257, 1024}, 4}, {"masked", {7, 33}, 2, true},
  };
  for (DType dt : case_helpers::kCaseDTypes)
    for (bool log : {false, true})
      for (const SoftmaxSpec& s : kSpecs) {
        v.push_back(softmax_case(s, log, dt));
        // Spread 200 makes rows one-hot to within e^-50: dx is then a near-total cancellation
        // whose rounding depends on the summation order, so backward skips that input.
        if (s.variant != "huge") v.push_back(softmax_backward_case(s, log, dt));
      }
}

}  // namespace tessel::testing
