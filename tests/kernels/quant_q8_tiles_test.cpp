// SPDX-License-Identifier: Apache-2.0
// Q8_0 products of a prompt's size, which the quantized matmul runs in register tiles
// (kernels/cpu/quant_q8_tiles.h) from 8 activation rows on; fewer rows take the row kernel.
// On every kernel set this CPU runs, under every byte dot product it has (vpmaddubsw, AVX-VNNI,
// AVX-512 VNNI, through limit_quant_dot) and both of the avx512 set's vector widths (512-bit
// tiles hold two outputs per vector; limit_quant_vector_bits): each output within the activation
// rounding bound of the fp64 product with the exactly dequantized weight (docs/KERNELS.md,
// "Accuracy"); every row the same bits alone (m = 1, the row kernel) as inside products of odd
// sizes (tiles and their remainders); the same bits under every dot product (the integer sums are
// exact either way); and the extreme codes (-128 against +-127) exact through the tiles.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant_dot_limits.h"
#include "kernels/quant_test_util.h"
#include "tessel/core/cpu_features.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/quant_format.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;

using testing_limits::AmxLimit;
using testing_limits::BitsLimit;
using testing_limits::DotLimit;
using testing_limits::dots_here;
using testing_quant::activations;
using testing_quant::extreme_activations;
using testing_quant::extreme_product;
using testing_quant::extreme_q8_0;
using testing_quant::random_q8_0;

Tensor product(KernelSet set, const Tensor& x, const Tensor& w, int64_t n) {
  Tensor y = zeros({x.size(0), n}, DType::F32);
  cpu_backend_for(set).quant_matmul(QuantType::Q8_0, x, w, y);
  return y;
}

std::string where(KernelSet set, QuantDot dot, int64_t m, int64_t n, int64_t k) {
  return std::string(kernel_set_name(set)) + " " + std::string(quant_dot_name(dot)) + " " +
         std::to_string(quant_vector_bits_for(set)) + "-bit m" + std::to_string(m) + " n" +
         std::to_string(n) + " k" + std::to_string(k);
}

struct Shape {
  int64_t m, n, k;
};
constexpr Shape kShapes[] = {{1, 96, 224},
                             {7, 224, 96},
                             {13, 96, 224},
                             {33, 7, 224},
                             {97, 224, 96},
                             {97, 13, 32},
                             {33, 96, 224},
                             // more rows than one L2 chunk of activation codes (128 at k = 4096)
                             {133, 13, 4096}};

// |y - y_ref| <= sum_g (max|x_g| / 254) sum_{j in g} |w_j| (the activation codes are within half
// a step) + 1e-5 sum_g max|x_g| sum_{j in g} |w_j| (f32 arithmetic).
TEST(QuantQ8Tiles, WithinTheActivationRoundingBoundOfFp64) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 tiles, not quant_amx.cpp
  uint32_t seed = 7;
  for (KernelSet set : runnable_kernel_sets())
    for (int bits : {512, 256})
      for (QuantDot dot : dots_here()) {
        DotLimit limit(dot);
        BitsLimit width(bits);
        double worst_ratio = 0;
        for (const Shape& s : kShapes) {
          std::mt19937 rng(seed++);
          const std::vector<uint8_t> bytes = random_q8_0(s.n, s.k, rng);
          const Tensor w = quant::quantized_weight(QuantType::Q8_0, bytes, s.n, s.k);
          const Tensor x = activations(s.m, s.k, rng);
          const Tensor y = product(set, x, w, s.n);
          ASSERT_TRUE(
              testing_quant::q8_0_within_fp64_bound(bytes, x, y, s.m, s.n, s.k, worst_ratio))
              << where(set, dot, s.m, s.n, s.k);
        }
        // Not loose by orders of magnitude: the rounding errors add up to a fair share of it.
        EXPECT_GT(worst_ratio, 1e-3) << kernel_set_name(set) << " " << quant_dot_name(dot);
      }
}

// Row i of every product is the bits of row i alone (m = 1: the row kernel), under every dot
// product and width, and the whole product is the same bits under all of them.
TEST(QuantQ8Tiles, RowsAloneEqualRowsInAPromptUnderEveryDot) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 tiles, not quant_amx.cpp
  for (KernelSet set : runnable_kernel_sets())
    for (const Shape& s : kShapes) {
      if (s.m == 1) continue;
      std::mt19937 rng(uint32_t(s.m * 1000 + s.n + s.k));
      const std::vector<uint8_t> bytes = random_q8_0(s.n, s.k, rng);
      const Tensor w = quant::quantized_weight(QuantType::Q8_0, bytes, s.n, s.k);
      const Tensor x = activations(s.m, s.k, rng);
      Tensor first;
      for (int bits : {512, 256})
        for (QuantDot dot : dots_here()) {
          DotLimit limit(dot);
          BitsLimit width(bits);
          const Tensor y = product(set, x, w, s.n);
          for (int64_t i = 0; i < s.m; ++i) {
            Tensor xi = empty({1, s.k}, DType::F32);
            std::memcpy(xi.data_ptr(), x.data<float>() + i * s.k, size_t(s.k) * 4);
            const Tensor yi = product(set, xi, w, s.n);
            ASSERT_EQ(std::memcmp(yi.data_ptr(), y.data<float>() + i * s.n, size_t(s.n) * 4), 0)
                << where(set, dot, s.m, s.n, s.k) << " row " << i;
          }
          if (!first.defined()) {
            first = y;
          } else {
            EXPECT_EQ(std::memcmp(first.data_ptr(), y.data_ptr(), size_t(s.m * s.n) * 4), 0)
                << where(set, dot, s.m, s.n, s.k) << " against " << quant_dot_name(dots_here()[0]);
          }
        }
    }
}

// Codes -128 and 127 with d = 1 against activations that round to +-127 exactly, in a product
// that runs in tiles: every lane sum is exact whatever the dot product (vpmaddubsw's pair sums
// stay below 2^15; vpdpbusd's x + 128 reaches 255).
TEST(QuantQ8Tiles, ExtremeCodesAreExactInTiles) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 tiles, not quant_amx.cpp
  constexpr int64_t k = 256, n = 5, m = 11;
  const Tensor w = quant::quantized_weight(QuantType::Q8_0, extreme_q8_0(n, k), n, k);
  const Tensor x = extreme_activations(m, k);
  for (KernelSet set : runnable_kernel_sets())
    for (int bits : {512, 256})
      for (QuantDot dot : dots_here()) {
        DotLimit limit(dot);
        BitsLimit width(bits);
        const Tensor y = product(set, x, w, n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            ASSERT_EQ(double(y.data<float>()[i * n + j]), extreme_product(k, i))
                << where(set, dot, m, n, k) << " row " << i << " col " << j;
      }
}

}  // namespace
}  // namespace tessel::kernels
