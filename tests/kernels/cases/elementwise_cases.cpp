// SPDX-License-Identifier: Apache-2.0
// Elementwise cases: every unary op forward and backward (inputs inside each op's domain and wide
// enough to cross every branch of the float approximations; backward with and without y), and
// every binary op under each broadcast pattern (same shape, bias, [rows, 1], outer product,
// scalars, a general 4-d mix), in f32, f64, bf16 and f16.
#include <cmath>

#include "case_helpers.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::testing {

namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

struct UnarySpec {
  UnaryOp op;
  double alpha = 0;
  double scale = 1;       // input spread
  bool positive = false;  // inputs |x| * scale + 0.25 (log, sqrt, rsqrt, fractional pow)
};

std::vector<UnarySpec> unary_specs() {
  return {{UnaryOp::Neg},
          {UnaryOp::Exp, 0, 3},
          {UnaryOp::Log, 0, 2, true},
          {UnaryOp::Sqrt, 0, 2, true},
          {UnaryOp::Rsqrt, 0, 2, true},
          {UnaryOp::Abs},
          {UnaryOp::Square},
          {UnaryOp::Tanh, 0, 3},
          {UnaryOp::Sigmoid, 0, 4},
          {UnaryOp::Relu},
          {UnaryOp::Gelu, 0, 3},
          {UnaryOp::Silu, 0, 4},
          {UnaryOp::Scale, -0.7},
          {UnaryOp::AddScalar, 2.5},
          {UnaryOp::Pow, 1.7, 1, true},
          {UnaryOp::Pow, 2.0},
          {UnaryOp::Pow, 3.0}};
}

std::string unary_variant(const UnarySpec& s) {
  std::string v(kernels::unary_name(s.op));
  if (s.op == UnaryOp::Pow) v += "_" + std::to_string(int(s.alpha * 10));
  return v;
}

Tensor unary_input(Generator& gen, const UnarySpec& s, const Shape& shape, DType dtype) {
  Tensor x = random_tensor(gen, shape, DType::F64, s.scale);
  if (s.positive) {
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = std::fabs(p[i]) + 0.25;
  }
  return x.to(dtype);
}

using case_helpers::dtype_str;
using case_helpers::shape_str;

OpCase unary_case(const UnarySpec& s, const Shape& shape, DType dtype) {
  OpCase c;
  c.name = "unary/" + unary_variant(s) + "/" + shape_str(shape) + "/" + dtype_str(dtype);
  c.op = kernels::Op::Unary;
  c.dtype = dtype;
  c.make_inputs = [=](Generator& gen) { return Tensors{unary_input(gen, s, shape, dtype)}; };
  c.make_outputs = [](const Tensors& in) { return Tensors{zeros_like(in[0])}; };
  c.run = [s](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.unary(s.op, in[0], out[0], s.alpha);
  };
  // f32: a few ulp per element from the float exp / tanh / pow. f64 goes through libm (<= 1 ulp)
  // and a few roundings that the kernel set may fuse (FMA in avx2 / avx512) or not, amplified
  // by the function's condition number |x f'(x) / f(x)|, up to about 8 for exp, GELU and SiLU at
  // these input spreads: 4 roundings x 8 = 32 ulp of f64 (measured: 15 ulp for one GELU input
  // with FMA). A wrong formula is off by far more than 1e-20.
  constexpr double kF64Ulps = 32 * 0x1p-53;
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, kF64Ulps * kF64Ulps);
  c.flops = double(shape.numel());
  c.bytes = 2.0 * double(shape.numel()) * double(dtype_size(dtype));
  return c;
}

// with_y = false passes an undefined y, so the kernel must recompute f(x) where it needs it.
OpCase unary_backward_case(const UnarySpec& s, const Shape& shape, DType dtype, bool with_y) {
  OpCase c;
  c.name = "unary_backward/" + unary_variant(s) + (with_y ? "" : "_no_y") + "/" + shape_str(shape) +
           "/" + dtype_str(dtype);
  c.op = kernels::Op::UnaryBackward;
  c.dtype = dtype;
  c.make_inputs = [=](Generator& gen) {
    Tensor x = unary_input(gen, s, shape, dtype);
    Tensor y = empty(shape, DType::F64);
    kernels::reference_backend().unary(s.op, x.to(DType::F64), y, s.alpha);
    return Tensors{x, with_y ? y.to(dtype) : Tensor(), random_tensor(gen, shape, dtype)};
  };
  c.make_outputs = [](const Tensors& in) { return Tensors{zeros_like(in[0])}; };
  c.run = [s](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.unary_backward(s.op, in[0], in[1], in[2], out[0], s.alpha);
  };
  // f32: the derivative from the rounded y (1 - y^2, y(1 - y), ...) adds an ulp or two.
  c.max_nmse = case_helpers::tolerance(dtype, 1e-12, 1e-28);
  c.flops = 2.0 * double(shape.numel());
  c.bytes = (with_y ? 4.0 : 3.0) * double(shape.numel()) * double(dtype_size(dtype));
  return c;
}

struct BinaryShapes {
  std::string variant;
  Shape a, b;
};

Shape broadcast(const Shape& a, const Shape& b) {
  return broadcast_shapes(a, b);
}

OpCase binary_case(BinaryOp op, const BinaryShapes& s, DType dtype) {
  OpCase c;
  c.name = "binary/" + std::string(kernels::binary_name(op)) + "_" + s.variant + "/" +
           shape_str(s.a) + "_" + shape_str(s.b) + "/" + dtype_str(dtype);
  c.op = kernels::Op::Binary;
  c.dtype = dtype;
  c.make_inputs = [=](Generator& gen) {
    Tensor a = random_tensor(gen, s.a, DType::F64);
    Tensor b = random_tensor(gen, s.b, DType::F64);
    if (s.variant == "nan") {  // NaN on either side must win max / min like any other op
      a.data<double>()[1] = NAN;
      b.data<double>()[2] = NAN;
    }
    if (op == BinaryOp::Div) {  // keep the divisor away from 0, both signs
      double* p = b.data<double>();
      for (int64_t i = 0; i < b.numel(); ++i) p[i] = std::copysign(std::fabs(p[i]) + 0.5, p[i]);
    }
    return Tensors{a.to(dtype), b.to(dtype)};
  };
  Shape out_shape = broadcast(s.a, s.b);
  c.make_outputs = [out_shape](const Tensors& in) {
    return Tensors{zeros(out_shape, in[0].dtype())};
  };
  c.run = [op](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.binary(op, in[0], in[1], out[0]);
  };
  // One rounding per element: half an ulp.
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-30);
  c.flops = double(out_shape.numel());
  c.bytes = double(s.a.numel() + s.b.numel() + out_shape.numel()) * double(dtype_size(dtype));
  return c;
}

}  // namespace

void add_elementwise_cases(std::vector<OpCase>& v) {
  const auto& kDtypes = case_helpers::kCaseDTypes;
  for (DType dt : kDtypes) {
    for (const UnarySpec& s : unary_specs()) {
      v.push_back(unary_case(s, {7, 33}, dt));
      v.push_back(unary_case(s, {1}, dt));
      v.push_back(unary_backward_case(s, {13, 33}, dt, true));
    }
    // Large enough to split over threads (and the sizes the benchmarks report).
    for (UnaryOp op : {UnaryOp::Gelu, UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Silu}) {
      // 262K normals times 3 reach x > 11.1, where exp(x) exceeds f16's largest finite 65504.
      if (op == UnaryOp::Exp && dt == DType::F16) continue;
      UnarySpec s{op, 0, 3};
      v.push_back(unary_case(s, {257, 1024}, dt));
      v.push_back(unary_backward_case(s, {257, 1024}, dt, true));
    }
    for (UnaryOp op :
         {UnaryOp::Exp, UnaryOp::Sqrt, UnaryOp::Rsqrt, UnaryOp::Tanh, UnaryOp::Sigmoid}) {
      UnarySpec s{op, 0, 2, op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt};
      v.push_back(unary_backward_case(s, {7, 13}, dt, false));
    }

    const BinaryShapes kShapes[] = {
        {"same", {7, 13}, {7, 13}},           {"bias", {7, 13}, {13}},    {"rows", {7, 13}, {7, 1}},
        {"outer", {7, 1, 13}, {1, 5, 13}},    {"scalar_b", {33, 7}, {1}}, {"scalar_a", {1}, {257}},
        {"general", {2, 3, 1, 5}, {3, 4, 1}}, {"one", {1}, {1}},
    };
    const BinaryOp kOps[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,
                             BinaryOp::Div, BinaryOp::Max, BinaryOp::Min};
    for (BinaryOp op : kOps)
      for (const BinaryShapes& s : kShapes) v.push_back(binary_case(op, s, dt));
    // Bias add and residual add at transformer sizes; split over threads mid-row.
    v.push_back(binary_case(BinaryOp::Add, {"bias", {257, 1024}, {1024}}, dt));
    v.push_back(binary_case(BinaryOp::Add, {"same", {257, 1024}, {257, 1024}}, dt));
    v.push_back(binary_case(BinaryOp::Mul, {"rows", {257, 1024}, {257, 1}}, dt));
    v.push_back(binary_case(BinaryOp::Mul, {"outer", {33, 1, 1025}, {1, 7, 1025}}, dt));
  }
}

}  // namespace tessel::testing
