// SPDX-License-Identifier: Apache-2.0
// Q4_0 products on AMX-INT8 tiles (kernels/cpu/quant_amx.cpp: the codes u expanded to the signed
// bytes u - 8 when a group is packed, then Q8_0's tiles; few_rows below 4 activation rows), through
// the avx512 set's quantized matmul. The AMX tests skip, naming what is missing, where this CPU or
// kernel has no AMX-INT8 (or TESSEL_QUANT_AMX=off). Checked: every output within the activation
// rounding bound of the fp64 product at odd sizes (m = 1, 7, 16, 17, 33, 97; k up to 4096; odd n);
// every output exactly the documented order (f32 of each block's integer sum of (u - 8) x, times
// f16(d) * d_x, one fused multiply-add per block in block order) on activations that round to int8
// without error; every row of a prompt the same bits as the row alone (few_rows against the
// tiles); the extreme codes exact; and the switch: off gives the avx2 set's bits. Without AMX
// (these two also under TESSEL_QUANT_AMX=off, by CTest): the avx512 set's register tiles
// (quant_q4_tiles.h) and the avx2 set's row kernel within the same bound, and a row the same
// bits alone and in a prompt.
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
#include "tessel/kernels/quant_amx.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;
using testing_limits::AmxLimit;
using testing_quant::activations;
using testing_quant::exact_activations;
using testing_quant::ExactActivations;
using testing_quant::random_q4_0;
using testing_quant::within_fp64_bound;

#define SKIP_WITHOUT_AMX()                                 \
  if (!quant_amx_enabled() || !cpu_features().x86_64_v4()) \
  GTEST_SKIP() << "no AMX-INT8 tiles here: " << quant_amx_status()

Tensor product(KernelSet set, const Tensor& x, const Tensor& w, int64_t n) {
  Tensor y = zeros({x.size(0), n}, DType::F32);
  cpu_backend_for(set).quant_matmul(QuantType::Q4_0, x, w, y);
  return y;
}

Tensor product(const Tensor& x, const Tensor& w, int64_t n) {
  return product(KernelSet::Avx512, x, w, n);
}

std::string where(int64_t m, int64_t n, int64_t k) {
  return "m" + std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k);
}

struct Shape {
  int64_t m, n, k;
};
// few_rows (m = 1) and the tiles with whole and partial tiles of activation rows (m % 16) and of
// weight rows (n % 16); 97 rows at k = 4096 span more than one chunk of activation codes
// (128 rows each at k = 4096 only from 129: 97 is one chunk, 133 two).
constexpr Shape kShapes[] = {{1, 13, 96},    {7, 5, 224},   {16, 33, 96},   {17, 7, 4096},
                             {33, 17, 1024}, {97, 15, 288}, {133, 3, 4096}, {1, 35, 4096}};

// |y - y_ref| <= sum_g (max|x_g| / 254) sum_{j in g} |w_j| + 1e-5 sum_g max|x_g| sum |w_j|
// (docs/KERNELS.md, "Accuracy").
void expect_within_bound(KernelSet set) {
  uint32_t seed = 21;
  double worst_ratio = 0;
  for (const Shape& s : kShapes) {
    std::mt19937 rng(seed++);
    const std::vector<uint8_t> bytes = random_q4_0(s.n, s.k, rng);
    const Tensor w = quant::quantized_weight(QuantType::Q4_0, bytes, s.n, s.k);
    const Tensor x = activations(s.m, s.k, rng);
    const Tensor y = product(set, x, w, s.n);
    ASSERT_TRUE(within_fp64_bound(QuantType::Q4_0, bytes, x, y, s.m, s.n, s.k, worst_ratio))
        << kernel_set_name(set) << " " << where(s.m, s.n, s.k);
  }
  EXPECT_GT(worst_ratio, 1e-3);  // not loose by orders of magnitude
}

TEST(QuantAmxQ4_0, WithinTheActivationRoundingBoundOfFp64) {
  SKIP_WITHOUT_AMX();
  expect_within_bound(KernelSet::Avx512);
}

// Activations that are int8 codes times a power of two per block, with a +-127 in every block, so
// their rounding to int8 is exact and the kernel's arithmetic can be written out here.
TEST(QuantAmxQ4_0, EqualsTheBlockOrderBitForBit) {
  SKIP_WITHOUT_AMX();
  // m = 1-3: few_rows, with whole and partial groups of 16 weight rows.
  constexpr Shape kExact[] = {{17, 5, 224}, {33, 31, 96}, {7, 7, 1024}, {1, 19, 64},
                              {3, 9, 128},  {2, 37, 96},  {3, 33, 288}, {1, 48, 1024}};
  std::mt19937 rng(5);
  for (const Shape& s : kExact) {
    const int64_t blocks = s.k / 32;
    const std::vector<uint8_t> bytes = random_q4_0(s.n, s.k, rng);
    const Tensor w = quant::quantized_weight(QuantType::Q4_0, bytes, s.n, s.k);
    const ExactActivations a = exact_activations(s.m, s.k, rng);
    const std::vector<int>& xq = a.xq;
    const std::vector<float>& dx = a.dx;
    const Tensor& x = a.x;
    const Tensor y = product(x, w, s.n);
    const auto* wb = reinterpret_cast<const quant::BlockQ4_0*>(bytes.data());
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        float acc = 0.0f;
        for (int64_t g = 0; g < blocks; ++g) {
          const quant::BlockQ4_0& b = wb[j * blocks + g];
          int32_t sum = 0;
          for (int c = 0; c < 16; ++c) {
            sum += (int32_t(b.qs[c] & 0xF) - 8) * xq[size_t(i * s.k + 32 * g + c)];
            sum += (int32_t(b.qs[c] >> 4) - 8) * xq[size_t(i * s.k + 32 * g + 16 + c)];
          }
          const float scale = quant::half_bits_to_float(b.d) * dx[size_t(i * blocks + g)];
          acc = std::fma(float(sum), scale, acc);
        }
        const float got = y.data<float>()[i * s.n + j];
        ASSERT_EQ(std::memcmp(&got, &acc, 4), 0) << where(s.m, s.n, s.k) << " row " << i << " col "
                                                 << j << ": got " << got << " want " << acc;
      }
  }
}

// Row i of each prompt has the bits of row i alone (few_rows) and of rows i..i+2 (few_rows, three
// rows): a row's result does not depend on m.
TEST(QuantAmxQ4_0, RowsAloneEqualRowsInAPrompt) {
  SKIP_WITHOUT_AMX();
  for (const Shape& s : kShapes) {
    if (s.m == 1) continue;
    std::mt19937 rng(uint32_t(s.m * 1000 + s.n + s.k));
    const Tensor w = quant::quantized_weight(QuantType::Q4_0, random_q4_0(s.n, s.k, rng), s.n, s.k);
    const Tensor x = activations(s.m, s.k, rng);
    const Tensor y = product(x, w, s.n);
    for (int64_t i = 0; i < s.m; ++i) {
      const int64_t rows = i + 3 <= s.m && i % 2 ? 3 : 1;
      Tensor xi = empty({rows, s.k}, DType::F32);
      std::memcpy(xi.data_ptr(), x.data<float>() + i * s.k, size_t(rows * s.k) * 4);
      const Tensor yi = product(xi, w, s.n);
      ASSERT_EQ(std::memcmp(yi.data_ptr(), y.data<float>() + i * s.n, size_t(rows * s.n) * 4), 0)
          << where(s.m, s.n, s.k) << " rows " << i << ".." << i + rows - 1;
    }
  }
}

// Codes 0 and 15 (weights -8 and 7, d = 1) against activations of +-1, which round to +-127
// exactly: every output an exact integer, on the tiles (m = 19) and few_rows (m = 2).
TEST(QuantAmxQ4_0, ExtremeCodesAreExact) {
  SKIP_WITHOUT_AMX();
  constexpr int64_t k = 256, n = 21;
  std::vector<quant::BlockQ4_0> blocks(size_t(n * k / 32));
  for (auto& b : blocks) {
    b.d = 0x3C00;
    for (auto& q : b.qs) q = 0xF0;  // low nibble 0 (-8), high nibble 15 (+7)
  }
  std::vector<uint8_t> bytes(blocks.size() * sizeof(quant::BlockQ4_0));
  std::memcpy(bytes.data(), blocks.data(), bytes.size());
  const Tensor w = quant::quantized_weight(QuantType::Q4_0, bytes, n, k);
  for (int64_t m : {19, 2}) {
    Tensor x = empty({m, k}, DType::F32);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < k; ++c)
        x.data<float>()[i * k + c] = i % 2 ? -1.0f : (c % 32 < 16 ? -1.0f : 1.0f);
    const Tensor y = product(x, w, n);
    for (int64_t i = 0; i < m; ++i) {
      // Per block: even rows 16 * 8 + 16 * 7, odd rows -(16 * -8 + 16 * 7) = 16.
      const double want = double(k / 32) * (i % 2 ? 16.0 : 240.0);
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(double(y.data<float>()[i * n + j]), want) << "m " << m << " row " << i;
    }
  }
}

// Switched off (allow_quant_amx(false), as TESSEL_QUANT_AMX=off does), Q4_0 takes the VNNI rows
// again: the avx512 set's product equals the avx2 set's bit for bit, as before the tiles.
TEST(QuantAmxQ4_0, SwitchedOffGivesTheVnniKernelsBits) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(3);
  constexpr int64_t m = 33, n = 13, k = 224;
  const Tensor w = quant::quantized_weight(QuantType::Q4_0, random_q4_0(n, k, rng), n, k);
  const Tensor x = activations(m, k, rng);
  const Tensor with_amx = product(x, w, n);
  const AmxLimit off(false);
  EXPECT_FALSE(quant_amx_enabled());
  const Tensor without = product(x, w, n);
  const Tensor avx2 = product(KernelSet::Avx2, x, w, n);
  EXPECT_EQ(std::memcmp(without.data_ptr(), avx2.data_ptr(), size_t(m * n) * 4), 0);
  // The AMX order is another one (not a test of quality: both are within the bound).
  EXPECT_NE(std::memcmp(with_amx.data_ptr(), avx2.data_ptr(), size_t(m * n) * 4), 0);
}

// Without AMX the avx512 set runs every m in register tiles (quant_q4_tiles.h: kQ4TileM x 4 in a
// prompt, 1 x 4 at m = 1), the avx2 set one row at a time, in one order: every row of a prompt the
// bits of the row alone, in both sets. Also under TESSEL_QUANT_AMX=off.
TEST(QuantAmxQ4_0, WithoutAmxRowsAloneEqualRowsInAPrompt) {
  const AmxLimit off(false);
  for (KernelSet set : runnable_kernel_sets()) {
    if (set == KernelSet::Baseline) continue;
    for (const Shape& s : kShapes) {
      if (s.m < 4) continue;
      std::mt19937 rng(uint32_t(s.m * 1000 + s.n + s.k));
      const Tensor w =
          quant::quantized_weight(QuantType::Q4_0, random_q4_0(s.n, s.k, rng), s.n, s.k);
      const Tensor x = activations(s.m, s.k, rng);
      const Tensor y = product(set, x, w, s.n);
      for (int64_t i = 0; i < s.m; ++i) {
        Tensor xi = empty({1, s.k}, DType::F32);
        std::memcpy(xi.data_ptr(), x.data<float>() + i * s.k, size_t(s.k) * 4);
        const Tensor yi = product(set, xi, w, s.n);
        ASSERT_EQ(std::memcmp(yi.data_ptr(), y.data<float>() + i * s.n, size_t(s.n) * 4), 0)
            << kernel_set_name(set) << " " << where(s.m, s.n, s.k) << " row " << i;
      }
    }
  }
}

// The kernels AMX replaces, at the same sizes: the avx512 set with AMX off and the avx2 set. Not
// skipped without AMX (CTest also runs it under TESSEL_QUANT_AMX=off).
TEST(QuantAmxQ4_0, WithoutAmxWithinTheSameBound) {
  const AmxLimit off(false);
  for (KernelSet set : runnable_kernel_sets()) {
    if (set == KernelSet::Baseline) continue;
    expect_within_bound(set);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace tessel::kernels
