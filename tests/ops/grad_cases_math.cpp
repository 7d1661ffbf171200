// SPDX-License-Identifier: Apache-2.0
// Finite-difference cases for element-wise arithmetic (with broadcasting), activations,
// reductions and shape ops, on odd shapes.
#include "gradcheck.h"
#include "tessel/ops/ops.h"

namespace tessel::testing {

namespace {

using Inputs = std::vector<Tensor>;

GradCase binary_case(std::string name, Shape a, Shape b, Tensor (*op)(const Tensor&, const Tensor&),
                     bool positive_b = false) {
  return {name,
          [=](Generator& g) {
            Tensor tb = positive_b ? uniform(b, 0.5, 2.0, g) : randn(b, DType::F64, &g);
            return Inputs{param(randn(a, DType::F64, &g)), param(tb)};
          },
          [op](const Inputs& in) { return op(in[0], in[1]); }};
}

GradCase unary_case(std::string name, Shape shape, std::function<Tensor(const Tensor&)> op,
                    double lo = -2.0, double hi = 2.0, bool avoid_zero = false) {
  return {name,
          [=](Generator& g) {
            return Inputs{
                param(avoid_zero ? away_from_zero(shape, lo, hi, g) : uniform(shape, lo, hi, g))};
          },
          [op](const Inputs& in) { return op(in[0]); }};
}

GradCase reduce_case(std::string name, Shape shape, std::vector<int> dims, bool keepdim,
                     Tensor (*op)(const Tensor&, const std::vector<int>&, bool)) {
  return {name, [=](Generator& g) { return Inputs{param(randn(shape, DType::F64, &g))}; },
          [=](const Inputs& in) { return op(in[0], dims, keepdim); }};
}

}  // namespace

void add_math_grad_cases(std::vector<GradCase>& v) {
  // Binary ops: equal shapes, trailing broadcast, both sides broadcasting, scalar-like [1].
  for (auto [suffix, a, b] : {std::tuple{"same_7x13", Shape{7, 13}, Shape{7, 13}},
                              std::tuple{"row_7x13_13", Shape{7, 13}, Shape{13}},
                              std::tuple{"outer_7x1x13_33x1", Shape{7, 1, 13}, Shape{33, 1}},
                              std::tuple{"col_1_7x13", Shape{1}, Shape{7, 13}},
                              std::tuple{"mixed_7x1_1x33", Shape{7, 1}, Shape{1, 33}}}) {
    std::string s(suffix);
    v.push_back(binary_case("add_" + s, a, b, ops::add));
    v.push_back(binary_case("sub_" + s, a, b, ops::sub));
    v.push_back(binary_case("mul_" + s, a, b, ops::mul));
    v.push_back(binary_case("div_" + s, a, b, ops::div, true));
  }

  const Shape s{7, 13};
  v.push_back(unary_case("add_scalar_7x13", s, [](const Tensor& x) { return ops::add(x, 1.5); }));
  v.push_back(unary_case("sub_scalar_7x13", s, [](const Tensor& x) { return ops::sub(x, 0.25); }));
  v.push_back(unary_case("mul_scalar_7x13", s, [](const Tensor& x) { return ops::mul(x, -3.0); }));
  v.push_back(unary_case("div_scalar_7x13", s, [](const Tensor& x) { return ops::div(x, 7.0); }));
  v.push_back(unary_case("neg_7x13", s, ops::neg));
  v.push_back(unary_case("exp_7x13", s, ops::exp));
  v.push_back(unary_case("log_7x13", s, ops::log, 0.5, 3.0));
  v.push_back(unary_case("sqrt_7x13", s, ops::sqrt, 0.5, 3.0));
  v.push_back(unary_case("rsqrt_7x13", s, ops::rsqrt, 0.5, 3.0));
  v.push_back(unary_case("abs_7x13", s, ops::abs, 0.1, 2.0, true));
  v.push_back(unary_case("square_7x13", s, ops::square));
  v.push_back(unary_case(
      "pow_2_5_7x13", s, [](const Tensor& x) { return ops::pow(x, 2.5); }, 0.5, 2.0));
  v.push_back(unary_case("pow_3_7x13", s, [](const Tensor& x) { return ops::pow(x, 3.0); }));
  v.push_back(unary_case("tanh_33", Shape{33}, ops::tanh, -3.0, 3.0));
  v.push_back(unary_case("sigmoid_33", Shape{33}, ops::sigmoid, -4.0, 4.0));
  v.push_back(unary_case("relu_7x13", s, ops::relu, 0.05, 2.0, true));
  v.push_back(unary_case("gelu_7x13", s, ops::gelu, -4.0, 4.0));
  v.push_back(unary_case("silu_7x13", s, ops::silu, -4.0, 4.0));
  v.push_back(unary_case("gelu_1", Shape{1}, ops::gelu));

  const Shape r{7, 1, 13};
  using ReduceFn = Tensor (*)(const Tensor&, const std::vector<int>&, bool);
  for (auto [name, op] : {std::pair<const char*, ReduceFn>{"sum", ops::sum},
                          {"mean", ops::mean},
                          {"max", ops::max},
                          {"min", ops::min}}) {
    std::string n(name);
    v.push_back(reduce_case(n + "_all_7x1x13", r, {}, false, op));
    v.push_back(reduce_case(n + "_dim2_7x1x13", r, {2}, false, op));
    v.push_back(reduce_case(n + "_dim0_keep_7x1x13", r, {0}, true, op));
    v.push_back(reduce_case(n + "_dims02_33x3x7", Shape{33, 3, 7}, {0, -1}, false, op));
  }

  auto x_case = [](std::string name, Shape shape, std::function<Tensor(const Tensor&)> op) {
    return GradCase{name, [=](Generator& g) { return Inputs{param(randn(shape, DType::F64, &g))}; },
                    [op](const Inputs& in) { return op(in[0]); }};
  };
  v.push_back(x_case("reshape_7x13", s, [](const Tensor& x) { return ops::reshape(x, {13, -1}); }));
  v.push_back(x_case("flatten_7x1x13", r, ops::flatten));
  v.push_back(
      x_case("transpose_7x1x13", r, [](const Tensor& x) { return ops::transpose(x, 0, 2); }));
  v.push_back(x_case("permute_7x3x13", Shape{7, 3, 13}, [](const Tensor& x) {
    return ops::permute(x, {2, 0, 1});
  }));
  v.push_back(x_case("slice_mid_7x13", s, [](const Tensor& x) { return ops::slice(x, 1, 3, 10); }));
  v.push_back(x_case("slice_head_7x13", s, [](const Tensor& x) { return ops::slice(x, 0, 0, 1); }));
  v.push_back(
      x_case("slice_tail_7x13", s, [](const Tensor& x) { return ops::slice(x, -1, 12, 13); }));
  // One piece unused: its gradient is zero, supplied by the engine.
  v.push_back(x_case("split_unused_piece_7x13", s, [](const Tensor& x) {
    std::vector<Tensor> p = ops::split(x, {3, 1, 9}, 1);
    return ops::concat({p[2], ops::mul(p[0], 2.0)}, 1);
  }));
  v.push_back(x_case("chunk_33x7", Shape{33, 7}, [](const Tensor& x) {
    std::vector<Tensor> p = ops::chunk(x, 4, 0);  // 9, 9, 9, 6
    return ops::mul(p[1], p[2]);
  }));
  v.push_back(GradCase{"concat_three_7x13",
                       [](Generator& g) {
                         return Inputs{param(randn({7, 1}, DType::F64, &g)),
                                       randn({7, 5}, DType::F64, &g),
                                       param(randn({7, 13}, DType::F64, &g))};
                       },
                       [](const Inputs& in) { return ops::concat(in, 1); }});
  v.push_back(
      x_case("mul_same_input_13", Shape{13}, [](const Tensor& x) { return ops::mul(x, x); }));
  // A composite: the same tensor along several paths.
  v.push_back(x_case("composite_reuse_13", Shape{13}, [](const Tensor& x) {
    Tensor y = ops::mul(ops::tanh(x), x);
    return ops::add(ops::exp(ops::mul(y, 0.5)), ops::sum(ops::square(x), {}, true));
  }));
}

}  // namespace tessel::testing
