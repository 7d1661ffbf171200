// SPDX-License-Identifier: Apache-2.0
// AdamW cases: the first step (bias correction 1 - beta), later steps with warm moments, with and
// without weight decay, odd sizes and a size that splits over threads. param, m and v are updated
// in place, so they are outputs made from copies of the inputs. f32 and f64.
#include <cmath>

#include "case_helpers.h"

namespace tessel::testing {

namespace {

using case_helpers::dtype_str;

struct AdamWSpec {
  std::string variant;
  Shape shape;
  kernels::AdamWParams params;
};

kernels::AdamWParams adamw_params(double lr, double weight_decay, int64_t step) {
  kernels::AdamWParams p;
  p.lr = lr;
  p.weight_decay = weight_decay;
  p.step = step;
  return p;
}

OpCase adamw_case(const AdamWSpec& s, DType dtype) {
  OpCase c;
  c.name = "adamw/" + s.variant + "/" + case_helpers::shape_str(s.shape) + "/" + dtype_str(dtype);
  c.op = kernels::Op::AdamW;
  c.dtype = dtype;
  bool warm = s.params.step > 1;
  c.make_inputs = [s, dtype, warm](Generator& gen) {
    DType st = kernels::stat_dtype(dtype);
    Tensor param = random_tensor(gen, s.shape, dtype);
    Tensor grad = random_tensor(gen, s.shape, dtype, 0.1);
    Tensor m = zeros(s.shape, st), v = zeros(s.shape, st);
    if (warm) {  // moments as after some steps: m ~ grad, v ~ grad^2 > 0
      m = random_tensor(gen, s.shape, st, 0.05);
      Tensor r = random_tensor(gen, s.shape, DType::F64, 0.1);
      double* p = r.data<double>();
      for (int64_t i = 0; i < r.numel(); ++i) p[i] = p[i] * p[i] + 1e-6;
      v = r.to(st);
    }
    return Tensors{param, grad, m, v};
  };
  c.make_outputs = [](const Tensors& in) {
    return Tensors{in[0].clone(), in[2].clone(), in[3].clone()};
  };
  kernels::AdamWParams params = s.params;
  c.run = [params](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.adamw(out[0], in[1], out[1], out[2], params);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-30);
  double n = double(s.shape.numel());
  c.flops = 14 * n;
  c.bytes = case_helpers::element_bytes(dtype, 7 * n);
  return c;
}

}  // namespace

void add_optimizer_cases(std::vector<OpCase>& v) {
  const AdamWSpec kSpecs[] = {
      {"first_step", {7, 13}, adamw_params(1e-3, 0.0, 1)},
      {"first_step_wd", {257}, adamw_params(1e-3, 0.1, 1)},
      {"step7_wd", {7, 13}, adamw_params(3e-4, 0.1, 7)},
      {"step1000_wd", {33, 257}, adamw_params(1e-2, 0.01, 1000)},
      {"one", {1}, adamw_params(1e-3, 0.1, 2)},
      {"large", {1024, 769}, adamw_params(6e-4, 0.1, 5)},
  };
  for (DType dt : {DType::F32, DType::F64})
    for (const AdamWSpec& s : kSpecs) v.push_back(adamw_case(s, dt));
}

}  // namespace tessel::testing
