// SPDX-License-Identifier: Apache-2.0
// The finite-difference harness behind grad_test.cpp.
// The loss sum(out * R) is summed with compensation so finite differences stay accurate.
#include "gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tessel/autograd/autograd.h"

namespace tessel::testing {

namespace {

// Compensated dot product: keeps the roundoff of sum(out * R) far below the differences taken.
double dot(const Tensor& out, const std::vector<double>& r) {
  std::vector<double> o = out.to_vector<double>();
  double s = 0, c = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    double y = o[i] * r[i] - c;
    double t = s + y;
    c = (t - s) - y;
    s = t;
  }
  return s;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace

Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen) {
  Tensor t = rand(shape, DType::F64, &gen);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (hi - lo) * p[i];
  return t;
}

Tensor away_from_zero(const Shape& shape, double lo, double hi, Generator& gen) {
  Tensor t = uniform(shape, lo, hi, gen);
  Tensor s = rand(shape, DType::F64, &gen);
  double* p = t.data<double>();
  const double* q = s.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = q[i] < 0.5 ? -p[i] : p[i];
  return t;
}

Tensor param(Tensor t) {
  t.set_requires_grad(true);
  return t;
}

Tensor ids(const Shape& shape, int64_t high, Generator& gen, DType dtype) {
  Tensor u = rand(shape, DType::F64, &gen);
  Tensor t = empty(shape, DType::I64);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int64_t>()[i] = std::min<int64_t>(high - 1, int64_t(u.data<double>()[i] * double(high)));
  return t.to(dtype);
}

GradCheckResult check_gradients(const GradCase& c, uint64_t seed, double eps) {
  Generator gen(seed);
  std::vector<Tensor> inputs = c.make_inputs(gen);
  Tensor out = c.fn(inputs);
  GradCheckResult result;
  std::ostringstream failures;
  if (!out.requires_grad()) {
    result.failures = "output does not require grad";
    return result;
  }
  Tensor r = randn(out.shape(), out.dtype(), &gen);
  std::vector<double> rv = r.to_vector<double>();
  autograd::backward({out}, {r});

  auto loss = [&] {
    autograd::NoGradGuard no_grad;
    return dot(c.fn(inputs), rv);
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    if (!x.grad().defined()) {
      failures << "input " << i << ": no gradient\n";
      continue;
    }
    std::vector<double> ad = x.grad().to_vector<double>();
    double* p = x.data<double>();
    int reported = 0;
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = p[j];
      p[j] = orig + eps;
      const double plus = loss();
      p[j] = orig - eps;
      const double minus = loss();
      p[j] = orig;
      const double fd = (plus - minus) / (2 * eps);
      const double err = std::abs(ad[size_t(j)] - fd) / std::max(std::abs(fd), 1.0);
      result.max_error = std::max(result.max_error, err);
      ++result.elements;
      if (!(err <= c.rtol) && reported++ < 5)
        failures << "input " << i << " " << x.shape() << " element " << j << ": autograd "
                 << ad[size_t(j)] << ", finite difference " << fd << " (error " << err << ")\n";
    }
  }
  result.failures = failures.str();
  return result;
}

double f32_vs_f64_error(const GradCase& c, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> in64 = c.make_inputs(gen);
  std::vector<Tensor> in32;
  for (const Tensor& t : in64) {
    if (!t.defined() || t.dtype() != DType::F64) {
      in32.push_back(t);
      continue;
    }
    Tensor t32 = t.to(DType::F32);
    if (t.requires_grad()) t32.set_requires_grad(true);
    in32.push_back(t32);
  }
  Tensor out64 = c.fn(in64), out32 = c.fn(in32);
  Tensor r = randn(out64.shape(), DType::F64, &gen);
  autograd::backward({out64}, {r.to(out64.dtype())});
  autograd::backward({out32}, {r.to(out32.dtype())});

  auto rel_diff = [](const Tensor& a32, const Tensor& b64) {
    std::vector<double> a = a32.to_vector<double>(), b = b64.to_vector<double>();
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d / std::max(max_abs(b), 1e-30);
  };
  double err = rel_diff(out32, out64);
  for (size_t i = 0; i < in64.size(); ++i)
    if (in64[i].defined() && in64[i].requires_grad())
      err = std::max(err, rel_diff(in32[i].grad(), in64[i].grad()));
  return err;
}

const std::vector<GradCase>& all_grad_cases() {
  static const std::vector<GradCase> cases = [] {
    std::vector<GradCase> v;
    add_math_grad_cases(v);
    add_nn_grad_cases(v);
    return v;
  }();
  return cases;
}

}  // namespace tessel::testing
