// SPDX-License-Identifier: Apache-2.0
// Q8_0 products on AMX-INT8 tiles (kernels/cpu/quant_amx.cpp), through the avx512 set's quantized
// matmul with the tiles switched on. Skipped, naming what is missing, where this CPU or kernel has
// no AMX-INT8 (or TESSEL_QUANT_AMX=off). Checked: every output within the activation rounding
// bound of the fp64 product at odd sizes (prompt rows 17 to 133, 5 to 33 weight rows, 1 to 128
// blocks, more rows than one L2 chunk); every output exactly the documented order (f32 of each
// block's integer sum, times f16(d_w) * d_x, one fused multiply-add per block in block order) on
// activations that round to int8 without error; every row the same bits alone as inside a prompt;
// the extreme codes exact; and the switch: off gives the VNNI kernels' bits.
#include "tessel/kernels/quant_amx.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant_dot_limits.h"
#include "kernels/quant_test_util.h"
#include "tessel/core/cpu_features.h"
#include "tessel/kernels/batch_invariant.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/quant_format.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;
using testing_limits::AmxLimit;
using testing_quant::activations;
using testing_quant::exact_activations;
using testing_quant::ExactActivations;
using testing_quant::extreme_activations;
using testing_quant::extreme_product;
using testing_quant::extreme_q8_0;
using testing_quant::random_q8_0;

#define SKIP_WITHOUT_AMX()                                 \
  if (!quant_amx_enabled() || !cpu_features().x86_64_v4()) \
  GTEST_SKIP() << "no AMX-INT8 tiles here: " << quant_amx_status()

// In batch-invariant mode unless told otherwise: outside it, rows below 4 take the VNNI rows.
Tensor product(const Tensor& x, const Tensor& w, int64_t n, bool invariant = true) {
  const BatchInvariantScope mode(invariant);
  Tensor y = zeros({x.size(0), n}, DType::F32);
  cpu_backend_for(KernelSet::Avx512).quant_matmul(QuantType::Q8_0, x, w, y);
  return y;
}

std::string where(int64_t m, int64_t n, int64_t k) {
  return "m" + std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k);
}

struct Shape {
  int64_t m, n, k;
};
// Partial tiles of activation rows (m % 16) and of weight rows (n % 16); 133 rows at k = 4096
// span two chunks of activation codes (128 rows each); 70 rows of 4 KiB are five groups of 16,
// one task each, which the pool's threads share.
constexpr Shape kShapes[] = {{1, 13, 96},    {17, 5, 224},  {33, 33, 96},
                             {97, 7, 32},    {97, 16, 288}, {133, 13, 4096},
                             {33, 17, 1024}, {16, 32, 64},  {17, 70, 4096}};

// |y - y_ref| <= sum_g (max|x_g| / 254) sum_{j in g} |w_j| + 1e-5 sum_g max|x_g| sum |w_j|, as
// for the other kernels (docs/KERNELS.md, "Accuracy").
TEST(QuantAmx, WithinTheActivationRoundingBoundOfFp64) {
  SKIP_WITHOUT_AMX();
  uint32_t seed = 11;
  double worst_ratio = 0;
  for (const Shape& s : kShapes) {
    std::mt19937 rng(seed++);
    const std::vector<uint8_t> bytes = random_q8_0(s.n, s.k, rng);
    const Tensor w = quant::quantized_weight(QuantType::Q8_0, bytes, s.n, s.k);
    const Tensor x = activations(s.m, s.k, rng);
    const Tensor y = product(x, w, s.n);
    ASSERT_TRUE(testing_quant::q8_0_within_fp64_bound(bytes, x, y, s.m, s.n, s.k, worst_ratio))
        << where(s.m, s.n, s.k);
  }
  EXPECT_GT(worst_ratio, 1e-3);  // not loose by orders of magnitude
}

// Activations that are int8 codes times a power of two per block, with a +-127 in every block, so
// the rounding to int8 is exact and the kernel's arithmetic can be written out here: per output
// acc = fma(f32(sum of the block's code products), f32(d_w) * d_x, acc) over the blocks in order.
TEST(QuantAmx, EqualsTheBlockOrderBitForBit) {
  SKIP_WITHOUT_AMX();
  constexpr Shape kExact[] = {{17, 5, 224}, {33, 31, 96}, {97, 7, 1024}, {1, 19, 64}};
  std::mt19937 rng(5);
  for (const Shape& s : kExact) {
    const int64_t blocks = s.k / 32;
    const std::vector<uint8_t> bytes = random_q8_0(s.n, s.k, rng);
    const Tensor w = quant::quantized_weight(QuantType::Q8_0, bytes, s.n, s.k);
    const ExactActivations a = exact_activations(s.m, s.k, rng);
    const std::vector<int>& xq = a.xq;
    const std::vector<float>& dx = a.dx;
    const Tensor& x = a.x;
    const Tensor y = product(x, w, s.n);
    const auto* wb = reinterpret_cast<const quant::BlockQ8_0*>(bytes.data());
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        float acc = 0.0f;
        for (int64_t g = 0; g < blocks; ++g) {
          const quant::BlockQ8_0& b = wb[j * blocks + g];
          int32_t sum = 0;
          for (int c = 0; c < 32; ++c) sum += int32_t(b.qs[c]) * xq[size_t(i * s.k + 32 * g + c)];
          const float scale = quant::half_bits_to_float(b.d) * dx[size_t(i * blocks + g)];
          acc = std::fma(float(sum), scale, acc);
        }
        const float got = y.data<float>()[i * s.n + j];
        ASSERT_EQ(std::memcmp(&got, &acc, 4), 0) << where(s.m, s.n, s.k) << " row " << i << " col "
                                                 << j << ": got " << got << " want " << acc;
      }
  }
}

// Row i of each product has the bits of row i alone (m = 1: one tile with 15 zero rows).
TEST(QuantAmx, RowsAloneEqualRowsInAPrompt) {
  SKIP_WITHOUT_AMX();
  for (const Shape& s : kShapes) {
    if (s.m == 1) continue;
    std::mt19937 rng(uint32_t(s.m * 1000 + s.n + s.k));
    const Tensor w = quant::quantized_weight(QuantType::Q8_0, random_q8_0(s.n, s.k, rng), s.n, s.k);
    const Tensor x = activations(s.m, s.k, rng);
    const Tensor y = product(x, w, s.n);
    for (int64_t i = 0; i < s.m; ++i) {
      Tensor xi = empty({1, s.k}, DType::F32);
      std::memcpy(xi.data_ptr(), x.data<float>() + i * s.k, size_t(s.k) * 4);
      const Tensor yi = product(xi, w, s.n);
      ASSERT_EQ(std::memcmp(yi.data_ptr(), y.data<float>() + i * s.n, size_t(s.n) * 4), 0)
          << where(s.m, s.n, s.k) << " row " << i;
    }
  }
}

// Codes -128 and 127 with d = 1 against activations that round to +-127 exactly: the tiles'
// signed products and int32 sums are exact.
TEST(QuantAmx, ExtremeCodesAreExact) {
  SKIP_WITHOUT_AMX();
  constexpr int64_t k = 256, n = 21, m = 19;
  const Tensor w = quant::quantized_weight(QuantType::Q8_0, extreme_q8_0(n, k), n, k);
  const Tensor x = extreme_activations(m, k);
  const Tensor y = product(x, w, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(double(y.data<float>()[i * n + j]), extreme_product(k, i))
          << "row " << i << " col " << j;
}

// Switched off (allow_quant_amx(false), as TESSEL_QUANT_AMX=off does), Q8_0 takes the VNNI
// kernels again: the avx512 set's product equals the avx2 set's bit for bit, as it did before.
TEST(QuantAmx, SwitchedOffGivesTheVnniKernelsBits) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(3);
  constexpr int64_t m = 33, n = 13, k = 224;
  const Tensor w = quant::quantized_weight(QuantType::Q8_0, random_q8_0(n, k, rng), n, k);
  const Tensor x = activations(m, k, rng);
  Tensor with_amx = product(x, w, n);
  const AmxLimit off(false);
  EXPECT_FALSE(quant_amx_enabled());
  Tensor without = product(x, w, n);
  Tensor avx2 = zeros({m, n}, DType::F32);
  cpu_backend_for(KernelSet::Avx2).quant_matmul(QuantType::Q8_0, x, w, avx2);
  EXPECT_EQ(std::memcmp(without.data_ptr(), avx2.data_ptr(), size_t(m * n) * 4), 0);
  // The AMX order is another one (not a test of quality: both are within the bound above).
  EXPECT_NE(std::memcmp(with_amx.data_ptr(), avx2.data_ptr(), size_t(m * n) * 4), 0);
}

// Outside batch-invariant mode a decode step (m < 4) keeps the VNNI rows, which are faster than
// few_rows (BENCHMARKS.md, "What the AMX tiles cost decode"): their bits are the switched-off
// product's, and a prompt's rows still come from the tiles (the invariant mode's bits).
TEST(QuantAmx, OutsideTheInvariantModeDecodeKeepsTheVnniRows) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(11);
  constexpr int64_t n = 13, k = 224;
  const Tensor w = quant::quantized_weight(QuantType::Q8_0, random_q8_0(n, k, rng), n, k);
  for (int64_t m : {int64_t(1), int64_t(3), int64_t(4), int64_t(17)}) {
    const Tensor x = activations(m, k, rng);
    const Tensor fast = product(x, w, n, false), tiles = product(x, w, n, true);
    Tensor vnni;
    {
      const AmxLimit off(false);
      vnni = product(x, w, n, false);
    }
    const size_t bytes = size_t(m * n) * 4;
    EXPECT_EQ(std::memcmp(fast.data_ptr(), (m < 4 ? vnni : tiles).data_ptr(), bytes), 0) << m;
    EXPECT_NE(std::memcmp(tiles.data_ptr(), vnni.data_ptr(), bytes), 0) << m;
  }
}

// TESSEL_QUANT_AMX=off (ctest kernels.quant_amx_off runs this binary so) keeps the tiles off
// whatever allow_quant_amx says, and the AMX tests above skip.
TEST(QuantAmx, EnvironmentSwitchesItOff) {
  const char* v = std::getenv("TESSEL_QUANT_AMX");
  if (v == nullptr || std::string(v) != "off") GTEST_SKIP() << "TESSEL_QUANT_AMX is not off";
  const AmxLimit on(true);
  EXPECT_FALSE(quant_amx_enabled());
  EXPECT_EQ(quant_amx_status(), "off (TESSEL_QUANT_AMX=off)");
}

// `tessel --version` (kernel_set_summary) names the switch by every type it puts on the tiles,
// not Q8_0 alone as before Q4_0 and the k-quants took them, on every CPU and kernel set.
TEST(QuantAmx, VersionNamesEveryTypeOnTheTiles) {
  const std::string line = kernel_set_summary();
  EXPECT_NE(line.find("; quant amx (q8_0 q4_0 q4_k q5_k q6_k): "), std::string::npos) << line;
  EXPECT_EQ(line.find("q8_0 amx"), std::string::npos) << line;
}

}  // namespace
}  // namespace tessel::kernels
