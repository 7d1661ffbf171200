// SPDX-License-Identifier: Apache-2.0
// CPU unary kernels and their backward: one contiguous loop per op that the compiler vectorises
// (`omp simd`; float exp / tanh come from simd_math.h), split over the thread pool in large
// chunks. GELU is the tanh form, evaluated as x * sigmoid(2u) = 0.5x(1 + tanh(u)), which has no
// cancellation for large |x|.
#include <cmath>
#include <numbers>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/half_kernels.h"
#include "tessel/kernels/cpu/loops.h"
#include "tessel/kernels/cpu/simd_math.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

using cpu::exp_t;
using cpu::sigmoid_t;
using cpu::tanh_t;

using cpu::kElementGrain;

constexpr double kGeluC = 0.044715;
const double kGeluK = std::sqrt(2.0 / std::numbers::pi);

template <typename T, typename F>
void map1(const T* x, T* y, int64_t n, F f) {
  parallel_for(0, n, kElementGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) y[i] = f(x[i]);
  });
}

template <typename T, typename F>
void map2(const T* x, const T* dy, T* dx, int64_t n, F f) {
  parallel_for(0, n, kElementGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) dx[i] = f(x[i], dy[i]);
  });
}

template <typename T>
void unary_impl(UnaryOp op, const T* x, T* y, int64_t n, double alpha) {
  const T a = T(alpha), k = T(kGeluK), c = T(kGeluC);
  switch (op) {
    case UnaryOp::Neg:
      return map1(x, y, n, [](T v) { return -v; });
    case UnaryOp::Exp:
      return map1(x, y, n, [](T v) { return exp_t(v); });
    case UnaryOp::Log:
      return map1(x, y, n, [](T v) { return std::log(v); });
    case UnaryOp::Sqrt:
      return map1(x, y, n, [](T v) { return std::sqrt(v); });
    case UnaryOp::Rsqrt:
      return map1(x, y, n, [](T v) { return T(1) / std::sqrt(v); });
    case UnaryOp::Abs:
      return map1(x, y, n, [](T v) { return std::fabs(v); });
    case UnaryOp::Square:
      return map1(x, y, n, [](T v) { return v * v; });
    case UnaryOp::Tanh:
      return map1(x, y, n, [](T v) { return tanh_t(v); });
    case UnaryOp::Sigmoid:
      return map1(x, y, n, [](T v) { return sigmoid_t(v); });
    case UnaryOp::Relu:
      return map1(x, y, n, [](T v) { return v > T(0) ? v : T(0); });
    case UnaryOp::Gelu:
      return map1(x, y, n, [k, c](T v) {
        T u = k * (v + c * v * v * v);
        return v / (T(1) + exp_t(T(-2) * u));
      });
    case UnaryOp::Silu:
      return map1(x, y, n, [](T v) { return v / (T(1) + exp_t(-v)); });
    case UnaryOp::Scale:
      return map1(x, y, n, [a](T v) { return a * v; });
    case UnaryOp::AddScalar:
      return map1(x, y, n, [a](T v) { return v + a; });
    case UnaryOp::Pow:
      if (alpha == 2.0) return map1(x, y, n, [](T v) { return v * v; });
      if (alpha == 1.0) return map1(x, y, n, [](T v) { return v; });
      if (alpha == 0.5) return map1(x, y, n, [](T v) { return std::sqrt(v); });
      return map1(x, y, n, [a](T v) { return std::pow(v, a); });
  }
  TESSEL_FAIL("unary: unknown op ", int(op));
}

// dx = dy * f'(x). `y` (= f(x)) is non-null for the ops whose derivative reads it.
template <typename T>
void unary_backward_impl(UnaryOp op, const T* x, const T* y, const T* dy, T* dx, int64_t n,
                         double alpha) {
  const T a = T(alpha), k = T(kGeluK), c = T(kGeluC);
  switch (op) {
    case UnaryOp::Neg:
      return map2(x, dy, dx, n, [](T, T g) { return -g; });
    case UnaryOp::Exp:
      return map2(y, dy, dx, n, [](T e, T g) { return g * e; });
    case UnaryOp::Log:
      return map2(x, dy, dx, n, [](T v, T g) { return g / v; });
    case UnaryOp::Sqrt:
      return map2(y, dy, dx, n, [](T s, T g) { return T(0.5) * g / s; });
    case UnaryOp::Rsqrt:  // d/dx x^-1/2 = -x^-3/2 / 2 = -y^3 / 2
      return map2(y, dy, dx, n, [](T r, T g) { return T(-0.5) * g * r * r * r; });
    case UnaryOp::Abs:
      return map2(x, dy, dx, n, [](T v, T g) { return v > T(0) ? g : (v < T(0) ? -g : T(0)); });
    case UnaryOp::Square:
      return map2(x, dy, dx, n, [](T v, T g) { return T(2) * v * g; });
    case UnaryOp::Tanh:
      return map2(y, dy, dx, n, [](T t, T g) { return g * (T(1) - t * t); });
    case UnaryOp::Sigmoid:
      return map2(y, dy, dx, n, [](T s, T g) { return g * s * (T(1) - s); });
    case UnaryOp::Relu:
      return map2(x, dy, dx, n, [](T v, T g) { return v > T(0) ? g : T(0); });
    case UnaryOp::Gelu:
      // 0.5(1 + tanh u) = s = sigmoid(2u) and 0.5(1 - tanh^2 u) = 2 s (1 - s), so
      // d/dx 0.5x(1 + tanh u) = s + 2 x s (1 - s) u'.
      return map2(x, dy, dx, n, [k, c](T v, T g) {
        T v2 = v * v;
        T u = k * (v + c * v2 * v);
        T du = k * (T(1) + T(3) * c * v2);
        T s = T(1) / (T(1) + exp_t(T(-2) * u));
        return g * (s + T(2) * v * s * (T(1) - s) * du);
      });
    case UnaryOp::Silu:
      return map2(x, dy, dx, n, [](T v, T g) {
        T s = sigmoid_t(v);
        return g * s * (T(1) + v * (T(1) - s));
      });
    case UnaryOp::Scale:
      return map2(x, dy, dx, n, [a](T, T g) { return a * g; });
    case UnaryOp::AddScalar:
      return map2(x, dy, dx, n, [](T, T g) { return g; });
    case UnaryOp::Pow:
      if (alpha == 0.0) return map2(x, dy, dx, n, [](T, T) { return T(0); });
      if (alpha == 1.0) return map2(x, dy, dx, n, [](T, T g) { return g; });
      if (alpha == 2.0) return map2(x, dy, dx, n, [](T v, T g) { return T(2) * v * g; });
      return map2(x, dy, dx, n, [a](T v, T g) { return g * a * std::pow(v, a - T(1)); });
  }
  TESSEL_FAIL("unary_backward: unknown op ", int(op));
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& x, Tensor& y, double alpha) {
  validate_unary(*this, x, y);
  if (cpu::is_half(x.dtype())) return cpu::half_unary(*this, op, x, y, alpha);
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    unary_impl<T>(op, x.data<T>(), y.data<T>(), x.numel(), alpha);
  });
}

void CpuBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                                Tensor& dx, double alpha) {
  validate_unary_backward(*this, x, y, dy, dx);
  if (cpu::is_half(x.dtype())) return cpu::half_unary_backward(*this, op, x, y, dy, dx, alpha);
  Tensor fx = y;
  if (unary_derivative_reads_y(op) && !fx.defined()) {
    fx = empty_like(x);
    unary(op, x, fx, alpha);
  }
  cpu::dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    unary_backward_impl<T>(op, x.data<T>(), fx.defined() ? fx.data<T>() : nullptr, dy.data<T>(),
                           dx.data<T>(), x.numel(), alpha);
  });
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
