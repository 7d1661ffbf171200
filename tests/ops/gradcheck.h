// SPDX-License-Identifier: Apache-2.0
// Finite-difference gradient checks for the differentiable ops. A GradCase makes fp64 inputs
// (those to differentiate have requires_grad set) and applies one op; the harness draws a random
// R of the output's shape, back-propagates R through the op (the gradient of sum(out * R)), and
// compares every input element's gradient with a central difference of sum(out * R).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::testing {

struct GradCase {
  std::string name;  // unique, [A-Za-z0-9_]
  std::function<std::vector<Tensor>(Generator&)> make_inputs;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  // on |autograd - finite difference| / max(|finite difference|, 1), in f64: central differences'
  // truncation error O(h^2) and f64 rounding O(u/h) dominate; no f32 kernel order enters.
  double rtol = 1e-7;
};

struct GradCheckResult {
  int64_t elements = 0;  // input elements checked
  double max_error = 0;
  std::string failures;  // empty when every element is within rtol
};

// Runs the case in fp64 on the current backend (see autograd::BackendScope).
GradCheckResult check_gradients(const GradCase& c, uint64_t seed, double eps = 1e-6);

// Runs the case in f32 and in f64 and returns the largest difference of outputs and of
// gradients, each relative to the largest f64 magnitude (a check that f32 runs the same math).
double f32_vs_f64_error(const GradCase& c, uint64_t seed);

const std::vector<GradCase>& all_grad_cases();
void add_math_grad_cases(std::vector<GradCase>& v);  // elementwise, activation, reduce, shape
void add_nn_grad_cases(std::vector<GradCase>& v);    // matmul, norm, softmax, embedding, ...

// Input helpers (f64).
Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen);
// Values in +-[lo, hi]: away from 0, for ops with a kink or pole there.
Tensor away_from_zero(const Shape& shape, double lo, double hi, Generator& gen);
Tensor param(Tensor t);  // sets requires_grad
Tensor ids(const Shape& shape, int64_t high, Generator& gen, DType dtype = DType::I64);

}  // namespace tessel::testing
