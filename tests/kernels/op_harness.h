// SPDX-License-Identifier: Apache-2.0
// The table-driven kernel harness (after ggml's test-backend-ops). An OpCase makes its inputs from
// a seeded generator, allocates its outputs and runs one kernel on any backend. The harness runs
// every case on the fp64 reference backend (inputs converted to f64) and on the backend under
// test, then compares each output by normalised MSE, with guard elements around every output so
// that an out-of-bounds write fails the case. The benchmarks time the same cases.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessel/kernels/backend.h"

namespace tessel::testing {

using Tensors = std::vector<Tensor>;

struct OpCase {
  std::string name;  // "<family>/<variant>/<shape>/<dtype>", unique
  kernels::Op op = kernels::Op::Unary;
  DType dtype = DType::F32;  // dtype of the floating inputs on the backend under test
  // Inputs in `dtype` (integer tensors, e.g. ids, keep their own dtype).
  std::function<Tensors(Generator&)> make_inputs;
  // Outputs for the given inputs, with their initial contents (zeros, or copies of inputs for
  // in-place kernels). Called once with the f64 inputs and once with the inputs in `dtype`.
  std::function<Tensors(const Tensors& inputs)> make_outputs;
  // Runs the kernel.
  std::function<void(kernels::Backend&, const Tensors& inputs, Tensors& outputs)> run;
  double max_nmse = 1e-10;  // per output, against the reference
  // An output whose reference is identically zero (a gradient that vanishes mathematically, as
  // dq and dk do when every query sees a single key) has no relative error: it passes when every
  // element's magnitude is at most this (0: it must be exactly zero as well).
  double zero_max_abs = 0;
  // Work per run, for the benchmarks (0 when not meaningful).
  double flops = 0;
  double bytes = 0;
};

// All registered cases (built on first call from the family lists in cases/).
const std::vector<OpCase>& all_op_cases();

// Normalised MSE: sum((got - want)^2) / sum(want^2), with 0/0 = 0. Non-finite values in `got`
// where `want` is finite (or the reverse) give +inf; -inf matching -inf counts as equal.
double nmse(const Tensor& got, const Tensor& want);

// A tensor with kGuardElements sentinel elements on each side inside one storage.
inline constexpr int64_t kGuardElements = 64;
Tensor guarded_copy(const Tensor& t);
bool guards_intact(const Tensor& guarded);

// Converts floating tensors to f64 (integer tensors pass through).
Tensors to_f64(const Tensors& tensors);

// Result of running one case: empty when it passed, else a description of what failed.
// On a device other than the host (a CUDA backend), the guarded inputs and outputs are copied
// there whole, guards included, the kernel runs on the copies, and the outputs and inputs come
// back whole for the same checks.
std::string check_op_case(const OpCase& c, kernels::Backend& backend,
                          Device device = Device::cpu());

// Helpers for writing cases.
Tensor random_tensor(Generator& gen, const Shape& shape, DType dtype, double scale = 1.0);
Tensor random_ids(Generator& gen, const Shape& shape, int64_t vocab, DType dtype = DType::I64);
std::string shape_tag(std::initializer_list<int64_t> dims);  // "7x13"

}  // namespace tessel::testing
