// SPDX-License-Identifier: Apache-2.0
// The GGUF weight formats (kernels/quant/): hand-built blocks of every type decode to values
// computed by hand from the ggml layouts (extreme and negative scales, zero blocks, smallest and
// largest codes, each nibble, bit and bit-pair position; Q5_K's fifth bit), and tessel's Int8
// rows; Q8_0 and Q4_0 quantize by ggml's rules; each
// type's quantize -> dequantize error on Gaussian rows of odd block counts stays under its bound;
// rows that are not a whole number of blocks are refused, naming the length and the block size.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/error_text.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/quantize.h"

namespace tessel::kernels::quant {
namespace {

using test::expect_error;

template <class Block>
std::vector<float> decode(QuantType type, const Block& b, int64_t k) {
  std::vector<float> out(static_cast<size_t>(k));
  dequantize_row(type, &b, out.data(), k);
  std::vector<double> exact(static_cast<size_t>(k));
  dequantize_row(type, &b, exact.data(), k);
  for (int64_t i = 0; i < k; ++i) EXPECT_EQ(double(out[size_t(i)]), exact[size_t(i)]) << i;
  return out;
}

TEST(QuantFormat, SizesAndIds) {
  EXPECT_EQ(row_bytes(QuantType::Q8_0, 64), 68);
  EXPECT_EQ(row_bytes(QuantType::Q4_0, 64), 36);
  EXPECT_EQ(row_bytes(QuantType::Q4_K, 512), 288);
  EXPECT_EQ(row_bytes(QuantType::Q6_K, 256), 210);
  EXPECT_EQ(row_bytes(QuantType::F16, 3), 6);
  EXPECT_EQ(row_bytes(QuantType::BF16, 5), 10);
  EXPECT_EQ(row_bytes(QuantType::Q5_K, 512), 352);
  EXPECT_EQ(quant_type_from_ggml(14), QuantType::Q6_K);
  EXPECT_EQ(quant_type_from_ggml(13), QuantType::Q5_K);
  EXPECT_EQ(quant_type_name(QuantType::Q4_K), "q4_K");
  EXPECT_EQ(quant_type_name(QuantType::Q5_K), "q5_K");
  expect_error([] { quant_type_from_ggml(3); }, {"ggml type id 3"});
}

TEST(QuantFormat, RowsNotAMultipleOfTheBlockAreRefused) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> bytes(4096);
  expect_error([] { row_bytes(QuantType::Q4_K, 300); }, {"q4_K", "300", "256"});
  expect_error([&] { quantize_row(QuantType::Q6_K, x.data(), bytes.data(), 300); },
               {"q6_K", "300", "256"});
  expect_error([&] { quantize_row(QuantType::Q8_0, x.data(), bytes.data(), 33); },
               {"q8_0", "33", "32"});
  expect_error([&] { dequantize_row(QuantType::Q4_0, bytes.data(), x.data(), 40); },
               {"q4_0", "40", "32"});
  expect_error([&] { dequantize(QuantType::Q4_K, bytes, Shape{2, 100}); }, {"100", "256"});
  // Right row length, wrong byte count.
  expect_error([&] { dequantize(QuantType::Q8_0, bytes, Shape{2, 64}); }, {"136", "4096"});
}

TEST(QuantFormat, Q8_0HandBuilt) {
  BlockQ8_0 b{};
  b.d = 0x3800;                                                // 0.5
  for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(j * 8 - 128);  // -128 (the lowest code) ...
  b.qs[31] = 127;
  const std::vector<float> x = decode(QuantType::Q8_0, b, 32);
  for (int j = 0; j < 31; ++j) EXPECT_EQ(x[size_t(j)], 0.5f * float(j * 8 - 128)) << j;
  EXPECT_EQ(x[31], 63.5f);
  // The largest finite f16 scale and a subnormal one.
  b.d = 0x7BFF;  // 65504
  EXPECT_EQ(decode(QuantType::Q8_0, b, 32)[31], 65504.0f * 127);
  EXPECT_EQ(decode(QuantType::Q8_0, b, 32)[0], 65504.0f * -128);
  b.d = 0x0001;  // 2^-24
  EXPECT_EQ(decode(QuantType::Q8_0, b, 32)[0], -128 * std::ldexp(1.0f, -24));
  BlockQ8_0 zero{};
  for (float v : decode(QuantType::Q8_0, zero, 32)) EXPECT_EQ(v, 0.0f);
}

TEST(QuantFormat, Q4_0HandBuilt) {
  BlockQ4_0 b{};
  b.d = 0xC000;  // -2
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
  const std::vector<float> x = decode(QuantType::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(x[size_t(j)], float(j - 8) * -2.0f) << j;            // low nibble: element j
    EXPECT_EQ(x[size_t(j + 16)], float(7 - j) * -2.0f) << j + 16;  // high nibble: element j+16
  }
  EXPECT_EQ(x[0], 16.0f);    // code 0 with a negative scale
  EXPECT_EQ(x[16], -14.0f);  // code 15
  BlockQ4_0 zero{};
  zero.qs[3] = 0xFF;  // codes but a zero scale
  for (float v : decode(QuantType::Q4_0, zero, 32)) EXPECT_EQ(v, 0.0f);
}

TEST(QuantFormat, Q4_KHandBuilt) {
  BlockQ4_K b{};
  b.d = 0x3400;     // 0.25
  b.dmin = 0x3800;  // 0.5
  const uint8_t scales[12] = {0xC1, 0x42, 0x03, 0x04, 0x85, 0x06,
                              0x07, 0x08, 0x9A, 0xBC, 0xDE, 0xF0};
  std::memcpy(b.scales, scales, 12);
  // Unpacked by hand from the bytes above (ggml's 6-bit packing).
  const int sc[8] = {1, 2, 3, 4, 58, 28, 14, 0};
  const int m[8] = {5, 6, 7, 8, 41, 11, 13, 15};
  for (int s = 0; s < 8; ++s) {
    EXPECT_EQ(q4k_scale(b.scales, s), sc[s]) << s;
    EXPECT_EQ(q4k_min(b.scales, s), m[s]) << s;
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = uint8_t((i & 0xF) | ((15 - (i & 0xF)) << 4));
  const std::vector<float> x = decode(QuantType::Q4_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int l = e % 32, sub = e / 32;
    const int code = (e % 64) < 32 ? (l & 0xF) : 15 - (l & 0xF);
    EXPECT_EQ(x[size_t(e)], 0.25f * float(sc[sub]) * float(code) - 0.5f * float(m[sub])) << e;
  }
  EXPECT_EQ(x[32 * 4 + 15], 0.25f * 58 * 15 - 0.5f * 41);  // sub-block 4, code 15
  EXPECT_EQ(x[32 * 7 + 3], -7.5f);                         // scale 0: only the min remains
  BlockQ4_K zero{};
  for (float v : decode(QuantType::Q4_K, zero, 256)) EXPECT_EQ(v, 0.0f);
}

TEST(QuantFormat, Q5_KHandBuilt) {
  BlockQ5_K b{};
  b.d = 0x3400;     // 0.25
  b.dmin = 0x3800;  // 0.5
  const uint8_t scales[12] = {0xC1, 0x42, 0x03, 0x04, 0x85, 0x06,
                              0x07, 0x08, 0x9A, 0xBC, 0xDE, 0xF0};
  std::memcpy(b.scales, scales, 12);  // Q4_K's packing: the values of Q4_KHandBuilt
  const int sc[8] = {1, 2, 3, 4, 58, 28, 14, 0};
  const int m[8] = {5, 6, 7, 8, 41, 11, 13, 15};
  for (int i = 0; i < 128; ++i) b.qs[i] = uint8_t((i & 0xF) | ((15 - (i & 0xF)) << 4));
  for (int l = 0; l < 32; ++l) b.qh[l] = uint8_t(l * 37 + 5);
  const std::vector<float> x = decode(QuantType::Q5_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int l = e % 32, pair = e / 64, upper = (e % 64) >= 32;
    const int low = upper ? 15 - (l & 0xF) : (l & 0xF);
    const int high = (uint8_t(l * 37 + 5) >> (2 * pair + upper)) & 1;
    const int code = low + 16 * high;
    EXPECT_EQ(x[size_t(e)], 0.25f * float(sc[e / 32]) * float(code) - 0.5f * float(m[e / 32])) << e;
  }
  // One high bit alone: bit 7 of qh[5] is element 64 * 3 + 32 + 5's fifth bit, worth 16 * d * sc.
  BlockQ5_K one{};
  one.d = 0x3C00;  // 1
  const int unit[8] = {1, 1, 1, 1, 1, 1, 1, 1}, none[8] = {};
  q4k_pack_scales(unit, none, one.scales);
  one.qh[5] = 0x80;
  const std::vector<float> y = decode(QuantType::Q5_K, one, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[size_t(e)], e == 229 ? 16.0f : 0.0f) << e;
  // The largest code, 31, and q5k_set_code writing it back bit for bit.
  BlockQ5_K full{};
  full.d = 0x3C00;
  q4k_pack_scales(unit, none, full.scales);
  for (int e = 0; e < 256; ++e) q5k_set_code(full, e, 31);
  for (float v : decode(QuantType::Q5_K, full, 256)) EXPECT_EQ(v, 31.0f);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(q5k_code(b, e), q5k_code(b, e) & 31);
  BlockQ5_K copy = b;
  for (int e = 0; e < 256; ++e) q5k_set_code(copy, e, q5k_code(b, e));
  EXPECT_EQ(std::memcmp(&copy, &b, sizeof b), 0);
}

// tessel's Int8 rows: the f32 scale, then one code per weight, for any k.
TEST(QuantFormat, Int8Rows) {
  EXPECT_EQ(row_bytes(QuantType::Int8, 13), 17);
  EXPECT_EQ(row_bytes(QuantType::Int8, 0), 4);
  EXPECT_FALSE(is_ggml_type_supported(uint32_t(QuantType::Int8)));
  uint8_t row[4 + 5];
  const float d = 0.5f;
  std::memcpy(row, &d, 4);
  const int8_t codes[5] = {-127, 127, 0, 3, -1};
  std::memcpy(row + 4, codes, 5);
  const std::vector<float> x = decode(QuantType::Int8, *reinterpret_cast<uint8_t(*)[9]>(row), 5);
  EXPECT_EQ(x, (std::vector<float>{-63.5f, 63.5f, 0.0f, 1.5f, -0.5f}));
  // The largest magnitude maps to +-127 exactly; the range is symmetric.
  const float w[5] = {0.2f, -2.54f, 1.0f, 0.0f, 2.0f};
  std::vector<uint8_t> bytes(9);
  quantize_row(QuantType::Int8, w, bytes.data(), 5);
  float stored;
  std::memcpy(&stored, bytes.data(), 4);
  EXPECT_EQ(stored, 2.54f / 127);
  EXPECT_EQ(int8_t(bytes[4 + 1]), -127);
  EXPECT_EQ(int8_t(bytes[4 + 4]), 100);
  expect_error([] { row_bytes(QuantType::Int8, -1); }, {"int8", "-1"});
}

TEST(QuantFormat, Q4_KScalePackingRoundTrips) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    int sc[8], m[8];
    for (int s = 0; s < 8; ++s) sc[s] = int(rng() % 64), m[s] = int(rng() % 64);
    if (trial == 0)
      for (int s = 0; s < 8; ++s) sc[s] = 63, m[s] = 63;
    uint8_t packed[12];
    q4k_pack_scales(sc, m, packed);
    for (int s = 0; s < 8; ++s) {
      EXPECT_EQ(q4k_scale(packed, s), sc[s]);
      EXPECT_EQ(q4k_min(packed, s), m[s]);
    }
  }
}

TEST(QuantFormat, Q6_KHandBuilt) {
  BlockQ6_K b{};
  b.d = 0xB000;  // -0.125
  const int8_t scales[16] = {-128, 127, 0, 1, -1, 2, 3, -4, 5, 6, 7, 8, 9, 10, 11, -12};
  std::memcpy(b.scales, scales, 16);
  b.ql[0] = 0x21;            // element 0: low nibble 1; element 64: high nibble 2
  b.ql[32] = 0x43;           // element 32: low 3; element 96: high 4
  b.qh[0] = 0xE4;            // bit pairs 0, 1, 2, 3 for elements 0, 32, 64, 96
  b.ql[64 + 32 + 5] = 0x0A;  // element 128 + 32 + 5: low nibble 10 ...
  b.qh[32 + 5] = 0x04;       // ... and bit pair 1 of qh[37]: code 26
  b.ql[127] = 0xF0;          // element 255: high nibble 15 ...
  b.qh[63] = 0x80;           // ... top bits 2: code 47
  const std::vector<float> x = decode(QuantType::Q6_K, b, 256);
  auto want = [&](int e, int code) { return -0.125f * float(scales[e / 16]) * float(code - 32); };
  EXPECT_EQ(x[0], want(0, 1));
  EXPECT_EQ(x[32], want(32, 19));
  EXPECT_EQ(x[64], want(64, 34));
  EXPECT_EQ(x[96], want(96, 52));
  EXPECT_EQ(x[165], want(165, 26));
  EXPECT_EQ(x[255], want(255, 47));
  EXPECT_EQ(x[1], -0.125f * -128 * -32);  // code 0 (all bits clear), most negative scale
  EXPECT_EQ(x[40], 0.0f);                 // scale 0
  for (int e : {0, 32, 64, 96, 165, 255, 1, 200})
    EXPECT_EQ(q6k_code(b, e), e == 0     ? 1
                              : e == 32  ? 19
                              : e == 64  ? 34
                              : e == 96  ? 52
                              : e == 165 ? 26
                              : e == 255 ? 47
                                         : 0);
  BlockQ6_K full{};
  std::memset(full.ql, 0xFF, sizeof full.ql);
  std::memset(full.qh, 0xFF, sizeof full.qh);
  full.d = 0x3C00;  // 1
  std::memcpy(full.scales, scales, 16);
  const std::vector<float> y = decode(QuantType::Q6_K, full, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[size_t(e)], float(scales[e / 16]) * 31) << e;
  // q6k_set_code writes what q6k_code reads, leaving the neighbours alone.
  BlockQ6_K w{};
  for (int e = 0; e < 256; ++e) q6k_set_code(w, e, (e * 7) % 64);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(q6k_code(w, e), (e * 7) % 64) << e;
}

TEST(QuantFormat, HalfRows) {
  const uint16_t f16[4] = {0x3C00, 0xC000, 0x7BFF, 0x0001};
  const uint16_t bf16[4] = {0x3F80, 0xC000, 0x7F7F, 0x0001};
  float x[4];
  dequantize_row(QuantType::F16, f16, x, 4);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], -2.0f);
  EXPECT_EQ(x[2], 65504.0f);
  EXPECT_EQ(x[3], std::ldexp(1.0f, -24));
  dequantize_row(QuantType::BF16, bf16, x, 4);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], -2.0f);
  EXPECT_EQ(x[2], std::bit_cast<float>(uint32_t(0x7F7F0000)));
  EXPECT_EQ(x[3], std::bit_cast<float>(uint32_t(0x00010000)));
}

TEST(QuantFormat, Q8_0AndQ4_0QuantizeByGgmlRules) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j) - 12.7f;  // max |x| = 18.3 at j = 31
  BlockQ8_0 q8;
  quantize_row(QuantType::Q8_0, x.data(), &q8, 32);
  const float d8 = 18.3f / 127;  // the f32 value ggml divides by
  EXPECT_EQ(q8.d, float_to_f16(d8).bits);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(q8.qs[j], int8_t(std::roundf(x[size_t(j)] * (1 / d8))));
  EXPECT_EQ(q8.qs[31], 127);
  // Q4_0: the largest-magnitude value is negative here, so it takes code 0 and d > 0.
  for (int j = 0; j < 32; ++j) x[size_t(j)] = j == 5 ? -16.0f : float(j % 7) - 3.0f;
  BlockQ4_0 q4;
  quantize_row(QuantType::Q4_0, x.data(), &q4, 32);
  EXPECT_EQ(q4.d, 0x4000);  // -16 / -8 = 2
  EXPECT_EQ(q4.qs[5] & 0xF, 0);
  for (int j = 0; j < 32; ++j) {
    const int code = j < 16 ? q4.qs[j] & 0xF : q4.qs[j - 16] >> 4;
    EXPECT_EQ(code, std::min(15, int(x[size_t(j)] / 2 + 8.5f))) << j;
  }
  // A positive maximum: d < 0, the maximum takes code 0, -max would need 16 and is capped at 15.
  for (int j = 0; j < 32; ++j) x[size_t(j)] = j == 0 ? 8.0f : (j == 1 ? -8.0f : 0.0f);
  quantize_row(QuantType::Q4_0, x.data(), &q4, 32);
  EXPECT_EQ(q4.d, 0xBC00);  // -1
  EXPECT_EQ(q4.qs[0] & 0xF, 0);
  EXPECT_EQ(q4.qs[1] & 0xF, 15);
  EXPECT_EQ(q4.qs[2] & 0xF, 8);
  // All zeros: d = 0 / -8 = -0 (stored as ggml stores it, f16 0x8000) and every code 8.
  std::vector<float> z(32, 0.0f);
  quantize_row(QuantType::Q4_0, z.data(), &q4, 32);
  EXPECT_EQ(q4.d, 0x8000);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q4.qs[j], 0x88);
}

// Quantize -> dequantize on Gaussian rows; the bounds are about 1.5x to 2x what was measured
// (docs/KERNELS.md lists the measured values).
double round_trip_nmse(QuantType type, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(k));
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> bytes(size_t(row_bytes(type, k)));
  quantize_row(type, x.data(), bytes.data(), k);
  std::vector<double> y(static_cast<size_t>(k));
  dequantize_row(type, bytes.data(), y.data(), k);
  double err = 0, ref = 0;
  for (int64_t i = 0; i < k; ++i) {
    err += (y[size_t(i)] - x[size_t(i)]) * (y[size_t(i)] - x[size_t(i)]);
    ref += double(x[size_t(i)]) * x[size_t(i)];
  }
  return err / ref;
}

TEST(QuantFormat, RoundTripErrorOnGaussianRows) {
  struct Bound {
    QuantType type;
    double max_nmse;
  };
  const Bound kBounds[] = {{QuantType::F16, 2e-7},  {QuantType::BF16, 1e-5},
                           {QuantType::Q8_0, 6e-5}, {QuantType::Q4_0, 1.2e-2},
                           {QuantType::Q4_K, 8e-3}, {QuantType::Q5_K, 2e-3},
                           {QuantType::Q6_K, 6e-4}, {QuantType::Int8, 2e-4}};
  for (const Bound& b : kBounds)
    for (int64_t blocks : {7, 13, 33}) {
      const int64_t k = blocks * std::max<int64_t>(block_elements(b.type), 32);
      const double e = round_trip_nmse(b.type, k, uint32_t(blocks));
      EXPECT_LE(e, b.max_nmse) << quant_type_name(b.type) << " " << blocks << " blocks";
      EXPECT_GT(e, 0.0) << quant_type_name(b.type);
      std::printf("round trip %s, %lld blocks: nmse %.3g\n",
                  std::string(quant_type_name(b.type)).c_str(), (long long)blocks, e);
    }
}

TEST(QuantFormat, ZeroAndConstantRowsRoundTrip) {
  std::vector<QuantType> types(std::begin(kAllQuantTypes), std::end(kAllQuantTypes));
  types.push_back(QuantType::Int8);
  for (QuantType t : types) {
    const int64_t k = 2 * std::max<int64_t>(block_elements(t), 32);
    std::vector<float> x(size_t(k), 0.0f), y(size_t(k), 1.0f);
    std::vector<uint8_t> bytes(size_t(row_bytes(t, k)));
    quantize_row(t, x.data(), bytes.data(), k);
    dequantize_row(t, bytes.data(), y.data(), k);
    for (float v : y) EXPECT_EQ(v, 0.0f) << quant_type_name(t);
    // A constant negative row: every format represents it within its step.
    std::fill(x.begin(), x.end(), -0.75f);
    quantize_row(t, x.data(), bytes.data(), k);
    dequantize_row(t, bytes.data(), y.data(), k);
    for (float v : y) EXPECT_NEAR(v, -0.75f, 0.75f / 60) << quant_type_name(t);
  }
}

TEST(QuantFormat, DequantizeTensor) {
  std::vector<float> x(2 * 3 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8);
  const std::vector<uint8_t> bytes = quantize_rows(QuantType::Q8_0, x.data(), 6, 64);
  Tensor t = dequantize(QuantType::Q8_0, bytes, Shape{2, 3, 64});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 64}));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(t.data<float>()[i], x[i], 8.0 / 127);
}

}  // namespace
}  // namespace tessel::kernels::quant
