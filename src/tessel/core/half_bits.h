// SPDX-License-Identifier: Apache-2.0
// bf16 / f16 <-> f32 conversions on raw 16-bit patterns as host/device functions, in integer
// arithmetic so that every compiler gives the same bits: round to nearest, ties to even; NaN stays
// a quiet NaN with its payload's top bits, overflow gives inf, f16 subnormals round exactly. They
// agree with core/dtype.h element by element (tests/core/half_bits_test.cpp checks that), and the
// CUDA casts use them, so a tensor converted on either device has the same bits.
#pragma once

#include <cstdint>

#include "tessel/core/host_device.h"

namespace tessel::hd {

TESSEL_HOST_DEVICE float bf16_to_f32(uint16_t h) {
  return bits_float(uint32_t(h) << 16);
}

TESSEL_HOST_DEVICE uint16_t f32_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TESSEL_HOST_DEVICE float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  const float v = float(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
  return sign ? -v : v;
}

TESSEL_HOST_DEVICE uint16_t f32_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Subnormal result: the significand m (with its implicit bit) times 2^(e - 150) is
    // m >> (126 - e) units of 2^-24, rounded to nearest even on the dropped bits.
    const uint32_t e = abs >> 23;
    if (e == 0) return sign;  // f32 subnormals are below half of 2^-24
    const uint32_t shift = 126u - e;
    if (shift > 24u) return sign;  // below half a unit: rounds to zero
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return uint16_t(sign | ((rounded >> 13) - (112u << 10)));
}

}  // namespace tessel::hd
