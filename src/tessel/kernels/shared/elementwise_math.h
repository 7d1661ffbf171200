// SPDX-License-Identifier: Apache-2.0
// The per-element f32 formulas of the unary ops and their derivatives, the binary ops and the
// AdamW update, as host/device functions: the CUDA kernels run exactly this code, and the CPU
// tests (tests/kernels/shared_math_test.cpp) check it, compiled for the host, against the CPU
// backend and the fp64 reference. The formulas are the CPU kernels' (cpu/elementwise.cpp,
// cpu/optimizer.cpp); exp is the same Cephes scheme as cpu/simd_math.h. That file keeps its own
// copy because everything there is compiled once per CPU kernel set in its own namespace: an
// inline function shared across kernel sets could be linked from the wrong instruction set.
#pragma once

#include <cmath>
#include <cstdint>

#include "tessel/core/host_device.h"
#include "tessel/kernels/backend.h"

namespace tessel::kernels::shared {

inline constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluC = 0.044715f;

// e^x, about 2 ulp (Cephes): n = round(x log2 e), e^r by a polynomial, scaled by 2^n in two
// halves. Clamped so that -inf gives 0 and large x gives inf; NaN propagates.
TESSEL_HOST_DEVICE float exp_f32(float x) {
  x = x < -110.0f ? -110.0f : x;
  x = x > 88.8f ? 88.8f : x;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kMagic;
  const float n = t - kMagic;
  const int32_t ni = int32_t(hd::float_bits(t) - hd::float_bits(kMagic));
  float r = n * -0.693359375f + x;
  r = n * 2.12194440e-4f + r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * (r * r) + r + 1.0f;
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  return e * hd::bits_float(uint32_t(n1 + 127) << 23) * hd::bits_float(uint32_t(n2 + 127) << 23);
}

TESSEL_HOST_DEVICE float tanh_f32(float x) {
  const float a = fabsf(x);
  const float big = copysignf(1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f), x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z + -5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z + -3.33332819422e-1f;
  const float small = (p * z) * x + x;
  return a < 0.625f ? small : big;
}

TESSEL_HOST_DEVICE float sigmoid_f32(float x) {
  return 1.0f / (1.0f + exp_f32(-x));
}

// y = f(x); a is alpha (Scale, AddScalar, Pow).
TESSEL_HOST_DEVICE float unary_f32(UnaryOp op, float x, float a) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Exp:
      return exp_f32(x);
    case UnaryOp::Log:
      return logf(x);
    case UnaryOp::Sqrt:
      return sqrtf(x);
    case UnaryOp::Rsqrt:
      return 1.0f / sqrtf(x);
    case UnaryOp::Abs:
      return fabsf(x);
    case UnaryOp::Square:
      return x * x;
    case UnaryOp::Tanh:
      return tanh_f32(x);
    case UnaryOp::Sigmoid:
      return sigmoid_f32(x);
    case UnaryOp::Relu:
      return x > 0.0f ? x : 0.0f;
    case UnaryOp::Gelu: {  // 0.5x(1 + tanh u) = x * sigmoid(2u): no cancellation for large |x|
      const float u = kGeluK * (x + kGeluC * x * x * x);
      return x / (1.0f + exp_f32(-2.0f * u));
    }
    case UnaryOp::Silu:
      return x / (1.0f + exp_f32(-x));
    case UnaryOp::Scale:
      return a * x;
    case UnaryOp::AddScalar:
      return x + a;
    case UnaryOp::Pow:
      if (a == 2.0f) return x * x;
      if (a == 1.0f) return x;
      if (a == 0.5f) return sqrtf(x);
      return powf(x, a);
  }
  return 0.0f;
}

// dx = g * f'(x), with y = f(x) for the ops whose derivative reads it (unary_derivative_reads_y).
TESSEL_HOST_DEVICE float unary_grad_f32(UnaryOp op, float x, float y, float g, float a) {
  switch (op) {
    case UnaryOp::Neg:
      return -g;
    case UnaryOp::Exp:
      return g * y;
    case UnaryOp::Log:
      return g / x;
    case UnaryOp::Sqrt:
      return 0.5f * g / y;
    case UnaryOp::Rsqrt:
      return -0.5f * g * y * y * y;
    case UnaryOp::Abs:
      return x > 0.0f ? g : (x < 0.0f ? -g : 0.0f);
    case UnaryOp::Square:
      return 2.0f * x * g;
    case UnaryOp::Tanh:
      return g * (1.0f - y * y);
    case UnaryOp::Sigmoid:
      return g * y * (1.0f - y);
    case UnaryOp::Relu:
      return x > 0.0f ? g : 0.0f;
    case UnaryOp::Gelu: {  // s = sigmoid(2u): d/dx = s + 2 x s (1 - s) u'
      const float x2 = x * x;
      const float u = kGeluK * (x + kGeluC * x2 * x);
      const float du = kGeluK * (1.0f + 3.0f * kGeluC * x2);
      const float s = 1.0f / (1.0f + exp_f32(-2.0f * u));
      return g * (s + 2.0f * x * s * (1.0f - s) * du);
    }
    case UnaryOp::Silu: {
      const float s = sigmoid_f32(x);
      return g * s * (1.0f + x * (1.0f - s));
    }
    case UnaryOp::Scale:
      return a * g;
    case UnaryOp::AddScalar:
      return g;
    case UnaryOp::Pow:
      if (a == 0.0f) return 0.0f;
      if (a == 1.0f) return g;
      if (a == 2.0f) return 2.0f * x * g;
      return g * a * powf(x, a - 1.0f);
  }
  return 0.0f;
}

// Max / min propagate NaN from either side, as the CPU kernels do.
TESSEL_HOST_DEVICE float binary_f32(BinaryOp op, float x, float y) {
  switch (op) {
    case BinaryOp::Add:
      return x + y;
    case BinaryOp::Sub:
      return x - y;
    case BinaryOp::Mul:
      return x * y;
    case BinaryOp::Div:
      return x / y;
    case BinaryOp::Max:
      return (x > y || x != x) ? x : y;
    case BinaryOp::Min:
      return (x < y || x != x) ? x : y;
  }
  return 0.0f;
}

// AdamW's per-step constants, computed in double on the host from AdamWParams as the CPU
// kernel computes them, then rounded to f32.
struct AdamWConstants {
  float decay;  // 1 - lr * weight_decay
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;       // lr / (1 - beta1^step)
  float inv_sqrt_bias2;  // 1 / sqrt(1 - beta2^step)
  float eps;
};

inline AdamWConstants adamw_constants(const AdamWParams& h, double weight_decay) {
  const double bias1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double bias2 = 1.0 - std::pow(h.beta2, double(h.step));
  return {float(1.0 - h.lr * weight_decay),
          float(h.beta1),
          float(1.0 - h.beta1),
          float(h.beta2),
          float(1.0 - h.beta2),
          float(h.lr / bias1),
          float(1.0 / std::sqrt(bias2)),
          float(h.eps)};
}

// One element of the step: moments updated in place, the new parameter returned.
TESSEL_HOST_DEVICE float adamw_update(const AdamWConstants& k, float p, float g, float& m,
                                      float& v) {
  m = k.beta1 * m + k.one_minus_beta1 * g;
  v = k.beta2 * v + k.one_minus_beta2 * g * g;
  return p * k.decay - k.step_size * m / (sqrtf(v) * k.inv_sqrt_bias2 + k.eps);
}

}  // namespace tessel::kernels::shared
