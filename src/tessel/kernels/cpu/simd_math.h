// SPDX-License-Identifier: Apache-2.0
// Branch-free float exp / tanh / sigmoid that the compiler vectorises inside `omp simd` loops
// (libm's do not vectorise without -ffast-math). exp is the Cephes scheme: n = round(x log2 e),
// r = x - n ln2 in two parts, a polynomial for e^r, scaling by 2^n; about 2 ulp.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu {

// a * b + c; fused where the target has FMA (plain std::fma would be a libm call without it).
inline float madd(float a, float b, float c) {
  return a * b + c;
}

inline float exp_f32(float x) {
  // Below -110 the result rounds to exactly 0 (masked softmax entries stay 0); above 88.73 it
  // overflows to inf through the scaling. NaN fails both comparisons and propagates.
  x = x < -110.0f ? -110.0f : x;
  x = x > 88.8f ? 88.8f : x;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float t = madd(x, 1.44269504088896341f, kMagic);
  float n = t - kMagic;
  int32_t ni = int32_t(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kMagic));
  // ln 2 split so that n * 0.693359375 is exact for |n| < 2^15.
  float r = madd(n, -0.693359375f, x);
  r = madd(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = madd(p, r, 1.3981999507e-3f);
  p = madd(p, r, 8.3334519073e-3f);
  p = madd(p, r, 4.1665795894e-2f);
  p = madd(p, r, 1.6666665459e-1f);
  p = madd(p, r, 5.0000001201e-1f);
  float e = madd(p, r * r, r) + 1.0f;
  // 2^n in two halves so that n in [-159, 129] never leaves the normal exponent range.
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = std::bit_cast<float>(uint32_t(n1 + 127) << 23);
  float s2 = std::bit_cast<float>(uint32_t(n2 + 127) << 23);
  return e * s1 * s2;
}

// tanh: an odd polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel), the exp form elsewhere.
inline float tanh_f32(float x) {
  float a = std::fabs(x);
  float big = 1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f);
  big = std::copysign(big, x);
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = madd(p, z, 2.06390887954e-2f);
  p = madd(p, z, -5.37397155531e-2f);
  p = madd(p, z, 1.33314422036e-1f);
  p = madd(p, z, -3.33332819422e-1f);
  float small = madd(p * z, x, x);
  return a < 0.625f ? small : big;
}

inline float sigmoid_f32(float x) {
  return 1.0f / (1.0f + exp_f32(-x));
}

// T = float uses the functions above; T = double goes through the C library.
template <typename T>
inline T exp_t(T x) {
  if constexpr (sizeof(T) == 4)
    return exp_f32(x);
  else
    return std::exp(x);
}
template <typename T>
inline T tanh_t(T x) {
  if constexpr (sizeof(T) == 4)
    return tanh_f32(x);
  else
    return std::tanh(x);
}
template <typename T>
inline T sigmoid_t(T x) {
  if constexpr (sizeof(T) == 4)
    return sigmoid_f32(x);
  else
    return T(1) / (T(1) + std::exp(-x));
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA::cpu
