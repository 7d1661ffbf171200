// SPDX-License-Identifier: Apache-2.0
// dtype conversions: bf16 and f16 rounding (ties to even), NaN, infinities, overflow, subnormals.
// f16 is checked exhaustively against the CPU's own F16C conversion instructions.
#include "tessel/core/dtype.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tessel/core/cpu_features.h"
#include "tessel/core/error.h"

namespace tessel {

// The CPU's own conversions, compiled for F16C alone: the tests are built for the x86-64-v2
// baseline, which has no F16C, and skip where the CPU lacks it.
__attribute__((target("f16c"))) float f16c_decode(uint16_t h) {
  return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) uint16_t f16c_encode(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
namespace {

float from_bits(uint32_t u) {
  return std::bit_cast<float>(u);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  for (DType d : kAllDTypes) EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
  try {
    dtype_from_name("f8");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'f8'"), std::string::npos) << e.what();
  }
}

TEST(BF16, RoundsToNearestEven) {
  // 1.0 + half an ulp of bf16 (2^-8) is a tie: rounds down to even 1.0.
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)).bits, 0x3f80u);
  // 1.0 + 3 half-ulps is a tie between 0x3f81 (odd) and 0x3f82 (even): rounds up.
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)).bits, 0x3f82u);
  // Just above the tie rounds up, just below rounds down.
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)).bits, 0x3f81u);
  EXPECT_EQ(float_to_bf16(from_bits(0x3f807fffu)).bits, 0x3f80u);
  // Rounding carries into the exponent; the largest finite float rounds to infinity.
  EXPECT_EQ(float_to_bf16(from_bits(0x3fffffffu)).bits, 0x4000u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()).bits, 0x7f80u);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()).bits, 0xff80u);
}

TEST(BF16, NaNStaysNaN) {
  // A NaN whose payload sits only in the low 16 bits must not become infinity.
  BF16 h = float_to_bf16(from_bits(0x7f800001u));
  EXPECT_TRUE(std::isnan(bf16_to_float(h)));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST(BF16, RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    float f = bf16_to_float(BF16{uint16_t(b)});
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f).bits, b);
  }
}

TEST(BF16, MatchesExactRoundingOnManyFloats) {
  // Against a rounding written with doubles: pick the nearer neighbour, ties to the even one.
  uint32_t u = 12345;
  for (int i = 0; i < 200000; ++i) {
    u = u * 1664525u + 1013904223u;
    float f = from_bits(u);
    if (!std::isfinite(f) || std::fabs(f) > 3e38f) continue;
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    double dlo = from_bits(lo), dhi = from_bits(hi), df = f;
    double dist_lo = std::fabs(df - dlo), dist_hi = std::fabs(dhi - df);
    uint16_t want = (dist_lo < dist_hi || (dist_lo == dist_hi && ((lo >> 16) & 1) == 0))
                        ? uint16_t(lo >> 16)
                        : uint16_t(hi >> 16);
    ASSERT_EQ(float_to_bf16(f).bits, want) << "float bits 0x" << std::hex << u;
  }
}

TEST(F16, DecodesEveryPatternLikeF16C) {
  if (!cpu_features().f16c) GTEST_SKIP() << "this CPU has no F16C";
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    float want = f16c_decode(uint16_t(b));
    float got = f16_to_float(F16{uint16_t(b)});
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << "bits " << b;
    }
  }
}

TEST(F16, EncodesLikeF16COnEdgeCasesAndManyFloats) {
  if (!cpu_features().f16c) GTEST_SKIP() << "this CPU has no F16C";
  std::vector<uint32_t> patterns = {0x00000000u,
                                    0x80000000u,
                                    0x3f800000u,
                                    0x477fe000u /*65504*/,
                                    0x477fefffu,
                                    0x477ff000u /*tie->inf*/,
                                    0x47800000u,
                                    0x7f800000u,
                                    0xff800000u,
                                    0x33800000u /*2^-24*/,
                                    0x33000000u /*2^-25 tie->0*/,
                                    0x33000001u,
                                    0x387fc000u,
                                    0x38800000u /*2^-14*/,
                                    0x3a800800u,
                                    0x3a801800u};
  uint32_t u = 777;
  for (int i = 0; i < 300000; ++i) {
    u = u * 1664525u + 1013904223u;
    patterns.push_back(u);
    patterns.push_back((u & 0x807fffffu) |
                       (uint32_t(100 + (u >> 24) % 50) << 23));  // near f16 range
  }
  for (uint32_t p : patterns) {
    float f = from_bits(p);
    uint16_t want = f16c_encode(f);
    uint16_t got = float_to_f16(f).bits;
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(F16{got})));
    } else {
      ASSERT_EQ(got, want) << "float bits 0x" << std::hex << p;
    }
  }
}

TEST(Convert, BetweenAllTypes) {
  const double values[] = {0.0, 1.0, -2.5, 100.75, -128.0, 3.9};
  for (DType src : kAllDTypes) {
    for (DType dst : kAllDTypes) {
      std::vector<unsigned char> a(6 * 8), b(6 * 8);
      for (size_t i = 0; i < 6; ++i) store_from_double(a.data(), src, i, values[i]);
      convert_elements(a.data(), src, b.data(), dst, 6);
      for (size_t i = 0; i < 6; ++i) {
        double s = load_as_double(a.data(), src, i);
        double want = std::trunc(s);
        if (dst == DType::F64) want = s;
        if (dst == DType::F32) want = float(s);
        if (dst == DType::BF16) want = bf16_to_float(float_to_bf16(float(s)));
        if (dst == DType::F16) want = f16_to_float(float_to_f16(float(s)));
        if (dst == DType::I8) want = std::clamp(std::trunc(s), -128.0, 127.0);
        EXPECT_EQ(load_as_double(b.data(), dst, i), want)
            << dtype_name(src) << " -> " << dtype_name(dst) << " value " << s;
      }
    }
  }
}

TEST(Convert, FloatToIntTruncatesSaturatesAndMapsNaNToZero) {
  float in[] = {2.9f, -2.9f, 1e10f, -1e10f, std::nanf("")};
  int32_t out[5];
  convert_elements(in, DType::F32, out, DType::I32, 5);
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[1], -2);
  EXPECT_EQ(out[2], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(out[3], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(out[4], 0);
}

}  // namespace
}  // namespace tessel
