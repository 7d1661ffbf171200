// SPDX-License-Identifier: Apache-2.0
// LayerNorm and RMSNorm cases, forward and backward: with and without the affine parameters,
// rows of one element, a single row, inputs far from zero mean (the variance must not come from
// E[x^2] - mean^2), 3-d inputs and transformer-sized rows split over threads. Gradients of the
// parameters start as garbage in the outputs: the kernels must overwrite them. f32, f64, bf16, f16.
#include "case_helpers.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::testing {

namespace {

using case_helpers::dtype_str;
using case_helpers::shape_str;

constexpr double kEps = 1e-5;

struct NormSpec {
  std::string variant;
  Shape shape;
  bool weight = true, bias = true;  // bias: LayerNorm only
  double offset = 0;                // added to x: a large mean
};

int64_t cols_of(const Shape& s) {
  return s[s.ndim() - 1];
}
int64_t rows_of(const Shape& s) {
  return s.numel() / std::max<int64_t>(cols_of(s), 1);
}

Tensor norm_input(Generator& gen, const NormSpec& s, DType dtype) {
  Tensor x = random_tensor(gen, s.shape, DType::F64);
  if (s.offset != 0) {
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] += s.offset;
  }
  return x.to(dtype);
}

// Affine parameters near 1 / 0 as after training a little.
Tensor param(Generator& gen, bool defined, int64_t cols, double center, DType dtype) {
  if (!defined) return Tensor();
  Tensor t = random_tensor(gen, {cols}, DType::F64, 0.3);
  double* p = t.data<double>();
  for (int64_t i = 0; i < cols; ++i) p[i] += center;
  return t.to(dtype);
}

Tensor stat_like(int64_t rows, DType dtype) {
  return zeros({rows}, kernels::stat_dtype(dtype));
}

std::string name(const char* family, const NormSpec& s, DType dtype) {
  return std::string(family) + "/" + s.variant + "/" + shape_str(s.shape) + "/" + dtype_str(dtype);
}

OpCase layer_norm_case(const NormSpec& s, DType dtype) {
  OpCase c;
  c.name = name("layer_norm", s, dtype);
  c.op = kernels::Op::LayerNorm;
  c.dtype = dtype;
  const int64_t cols = cols_of(s.shape), rows = rows_of(s.shape);
  c.make_inputs = [=](Generator& gen) {
    Tensor x = norm_input(gen, s, dtype);
    return Tensors{x, param(gen, s.weight, cols, 1.0, dtype), param(gen, s.bias, cols, 0.0, dtype)};
  };
  c.make_outputs = [rows](const Tensors& in) {
    return Tensors{zeros_like(in[0]), stat_like(rows, in[0].dtype()),
                   stat_like(rows, in[0].dtype())};
  };
  c.run = [](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.layer_norm(in[0], in[1], in[2], kEps, out[0], out[1], out[2]);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-28);
  double n = double(s.shape.numel());
  c.flops = 8 * n;
  c.bytes = case_helpers::element_bytes(dtype, 2 * n + 2 * double(cols) + 2 * double(rows));
  return c;
}

// Backward inputs: dy, x, weight, and the mean / rstd the reference forward saves.
Tensors norm_backward_inputs(Generator& gen, const NormSpec& s, DType dtype, bool layer) {
  const int64_t cols = cols_of(s.shape), rows = rows_of(s.shape);
  Tensor x = norm_input(gen, s, dtype);
  Tensor w = param(gen, s.weight, cols, 1.0, dtype);
  Tensor dy = random_tensor(gen, s.shape, dtype);
  Tensor x64 = x.to(DType::F64), y = empty(s.shape, DType::F64);
  Tensor mean = empty({rows}, DType::F64), rstd = empty({rows}, DType::F64);
  Tensor w64 = w.defined() ? w.to(DType::F64) : Tensor();
  if (layer)
    kernels::reference_backend().layer_norm(x64, w64, Tensor(), kEps, y, mean, rstd);
  else
    kernels::reference_backend().rms_norm(x64, w64, kEps, y, rstd);
  DType st = kernels::stat_dtype(dtype);
  return Tensors{dy, x, w, layer ? mean.to(st) : Tensor(), rstd.to(st)};
}

OpCase layer_norm_backward_case(const NormSpec& s, DType dtype) {
  OpCase c;
  c.name = name("layer_norm_backward", s, dtype);
  c.op = kernels::Op::LayerNormBackward;
  c.dtype = dtype;
  const int64_t cols = cols_of(s.shape), rows = rows_of(s.shape);
  c.make_inputs = [=](Generator& gen) { return norm_backward_inputs(gen, s, dtype, true); };
  bool with_w = s.weight, with_b = s.bias;
  c.make_outputs = [=](const Tensors& in) {
    DType dt = in[1].dtype();
    return Tensors{zeros_like(in[1]), with_w ? full({cols}, 7.0, dt) : Tensor(),
                   with_b ? full({cols}, -3.0, dt) : Tensor()};
  };
  c.run = [](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.layer_norm_backward(in[0], in[1], in[2], in[3], in[4], out[0], out[1], out[2]);
  };
  // dx is computed in double on the CPU (for f32 too): only the final rounding remains.
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-28);
  double n = double(s.shape.numel());
  c.flops = 12 * n;
  c.bytes = case_helpers::element_bytes(dtype, 3 * n + 3 * double(cols) + 2 * double(rows));
  return c;
}

OpCase rms_norm_case(const NormSpec& s, DType dtype) {
  OpCase c;
  c.name = name("rms_norm", s, dtype);
  c.op = kernels::Op::RmsNorm;
  c.dtype = dtype;
  const int64_t cols = cols_of(s.shape), rows = rows_of(s.shape);
  c.make_inputs = [=](Generator& gen) {
    Tensor x = norm_input(gen, s, dtype);
    return Tensors{x, param(gen, s.weight, cols, 1.0, dtype)};
  };
  c.make_outputs = [rows](const Tensors& in) {
    return Tensors{zeros_like(in[0]), stat_like(rows, in[0].dtype())};
  };
  c.run = [](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.rms_norm(in[0], in[1], kEps, out[0], out[1]);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-28);
  double n = double(s.shape.numel());
  c.flops = 5 * n;
  c.bytes = case_helpers::element_bytes(dtype, 2 * n + double(cols) + double(rows));
  return c;
}

OpCase rms_norm_backward_case(const NormSpec& s, DType dtype) {
  OpCase c;
  c.name = name("rms_norm_backward", s, dtype);
  c.op = kernels::Op::RmsNormBackward;
  c.dtype = dtype;
  const int64_t cols = cols_of(s.shape), rows = rows_of(s.shape);
  c.make_inputs = [=](Generator& gen) { return norm_backward_inputs(gen, s, dtype, false); };
  bool with_w = s.weight;
  c.make_outputs = [=](const Tensors& in) {
    return Tensors{zeros_like(in[1]), with_w ? full({cols}, 7.0, in[1].dtype()) : Tensor()};
  };
  c.run = [](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.rms_norm_backward(in[0], in[1], in[2], in[4], out[0], out[1]);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-28);
  double n = double(s.shape.numel());
  c.flops = 8 * n;
  c.bytes = case_helpers::element_bytes(dtype, 3 * n + 2 * double(cols) + double(rows));
  return c;
}

}  // namespace

void add_norm_cases(std::vector<OpCase>& v) {
  const NormSpec kSpecs[] = {
      {"affine", {7, 13}},
      {"no_affine", {7, 33}, false, false},
      {"weight_only", {13, 33}, true, false},
      {"rows_of_1", {7, 1}},
      {"single_row", {1, 257}},
      {"offset_mean", {13, 257}, true, true, 100.0},
      {"3d", {3, 5, 33}},
      {"gpt2", {1024, 768}},
  };
  for (DType dt : case_helpers::kCaseDTypes)
    for (const NormSpec& s : kSpecs) {
      v.push_back(layer_norm_case(s, dt));
      v.push_back(layer_norm_backward_case(s, dt));
      v.push_back(rms_norm_case(s, dt));
      OpCase rms_backward = rms_norm_backward_case(s, dt);
      // One-element rows: dx = rstd * g * (1 - xhat^2) with xhat^2 = x^2 / (x^2 + eps) ~ 1, a
      // cancellation that costs ~5 digits in any double evaluation, the reference's included.
      if (s.shape[s.shape.ndim() - 1] == 1 && dt == DType::F64) rms_backward.max_nmse = 1e-22;
      v.push_back(rms_backward);
    }
}

}  // namespace tessel::testing
