// SPDX-License-Identifier: Apache-2.0
// The host/device bf16 / f16 conversions (core/half_bits.h, which the CUDA casts and kernels use)
// against core/dtype.h's: every 16-bit pattern widened, and narrowing on every float whose low
// bits cover the rounding cases (ties, subnormals, overflow, NaN) plus a dense stride of all
// 2^32 patterns.
#include "tessel/core/half_bits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tessel/core/dtype.h"

namespace tessel {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(HalfBits, WideningMatchesCoreForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    ASSERT_EQ(bits_of(hd::bf16_to_f32(uint16_t(h))), bits_of(bf16_to_float(BF16{uint16_t(h)})))
        << "bf16 " << h;
    ASSERT_EQ(bits_of(hd::f16_to_f32(uint16_t(h))), bits_of(f16_to_float(F16{uint16_t(h)})))
        << "f16 " << h;
  }
}

// Patterns with every exponent and sign and low mantissa bits near each rounding boundary.
void expect_narrowing_equal(uint32_t u) {
  const float f = from_bits(u);
  ASSERT_EQ(hd::f32_to_bf16(f), float_to_bf16(f).bits) << "bf16 of bits " << u;
  ASSERT_EQ(hd::f32_to_f16(f), float_to_f16(f).bits) << "f16 of bits " << u;
}

TEST(HalfBits, NarrowingMatchesCoreAtRoundingBoundaries) {
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t exp = 0; exp < 256; ++exp)
      for (uint32_t high : {0u, 1u, 0x155u, 0x2aau, 0x3ffu})
        for (uint32_t low = 0; low < 0x4000u; low += 0x3ffu)
          for (int32_t delta = -2; delta <= 2; ++delta) {
            // f16 keeps 10 mantissa bits, bf16 7: exercise bit 12/13 and 15/16 neighbourhoods.
            const uint32_t mant = (((high << 13) | low) + uint32_t(delta)) & 0x7fffffu;
            expect_narrowing_equal((sign << 31) | (exp << 23) | mant);
            expect_narrowing_equal((sign << 31) | (exp << 23) | ((mant & 0x7f0000u) | 0x8000u));
          }
}

TEST(HalfBits, NarrowingMatchesCoreOnAStrideOfAllFloats) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 257) expect_narrowing_equal(uint32_t(u));
}

TEST(HalfBits, KnownValues) {
  EXPECT_EQ(hd::f32_to_f16(65520.0f), 0x7c00u);                      // rounds to inf
  EXPECT_EQ(hd::f32_to_f16(65504.0f), 0x7bffu);                      // the largest finite
  EXPECT_EQ(hd::f32_to_f16(std::ldexp(1.0f, -25)), 0x0000u);         // tie to even: zero
  EXPECT_EQ(hd::f32_to_f16(std::ldexp(1.5f, -25)), 0x0001u);         // above the tie
  EXPECT_EQ(hd::f32_to_f16(std::ldexp(3.0f, -25)), 0x0002u);         // 1.5 units: tie to 2
  EXPECT_EQ(hd::f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80u);  // tie to even
  EXPECT_EQ(hd::f32_to_bf16(-std::nanf("")) & 0x7fc0u, 0x7fc0u);
}

}  // namespace
}  // namespace tessel
