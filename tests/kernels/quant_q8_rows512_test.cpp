// SPDX-License-Identifier: Apache-2.0
// The avx512 set's 512-bit Q8_0 decode rows (kernels/cpu/quant_q8_rows512.h: two weight rows per
// register, the weight codes entering vpdpbusd as w + 128 against a start of -128 * the
// activation codes' lane sums) against the 256-bit rows that kernel_set.h's
// limit_quant_vector_bits(256) brings back: every output equal bit for bit, since every int32 lane
// is the same exact sum and the f32 steps are the same. At odd sizes (weight rows 5, 7, 13, 33:
// whole groups of four and one-row tails; 1, 3, 7 and 24 blocks per row; 1 to 7 activation rows,
// the rows below the tiles), with the extreme codes (-128 and 127 against activation codes +-127)
// and all-zero blocks among random ones; and within the activations' int8 rounding bound of the
// fp64 product (docs/KERNELS.md, "Accuracy"). AMX is switched off (with it on, batch-invariant
// decode takes quant_amx.cpp's rows instead). Skipped, naming what is missing, on a CPU without
// AVX-512 VNNI or a build without the avx512 set.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant_dot_limits.h"
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

std::string missing_vnni512() {
  const CpuFeatures& f = cpu_features();
  if (!f.avx512_vnni) return "this CPU lacks avx512_vnni";
  for (KernelSet s : runnable_kernel_sets())
    if (s == KernelSet::Avx512) return "";
  return "the avx512 kernel set was not built (or the OS does not enable it)";
}

// Random Q8_0 rows: every code, f16 scales of both signs, one block in 8 all zero, and one block
// in 8 of the extreme codes -128 and 127 only.
std::vector<uint8_t> random_rows(int64_t n, int64_t k, std::mt19937& rng) {
  const int64_t blocks = n * k / 32;
  std::vector<uint8_t> bytes(size_t(blocks * 34));
  std::uniform_int_distribution<int> byte(0, 255), coin(0, 7);
  std::uniform_real_distribution<float> mag(1e-3f, 0.1f);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* p = bytes.data() + b * 34;
    const int kind = coin(rng);
    const uint16_t h = float_to_f16(coin(rng) % 2 ? mag(rng) : -mag(rng)).bits;
    std::memcpy(p, &h, 2);
    for (int j = 0; j < 32; ++j)
      p[2 + j] = kind == 0   ? 0
                 : kind == 1 ? uint8_t(byte(rng) % 2 ? 0x80 : 0x7F)
                             : uint8_t(byte(rng));
  }
  return bytes;
}

// Gaussian activations with an outlier per block; every third block a block whose largest
// magnitude is shared by all its elements (codes +-127 after rounding).
Tensor activations(int64_t m, int64_t k, std::mt19937& rng) {
  Tensor x = empty({m, k}, DType::F32);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* p = x.data<float>();
  for (int64_t i = 0; i < m * k; ++i) {
    const int64_t g = (i % k) / 32;
    p[i] =
        g % 3 == 2 ? (normal(rng) < 0 ? -2.5f : 2.5f) : normal(rng) * (i % 32 == 5 ? 50.0f : 1.0f);
  }
  return x;
}

Tensor product(const Tensor& x, const Tensor& w, int64_t n, int bits) {
  const BitsLimit limit(bits);
  EXPECT_EQ(quant_vector_bits_for(KernelSet::Avx512), bits);
  Tensor y = full({x.shape()[0], n}, 7.0, DType::F32);
  cpu_backend_for(KernelSet::Avx512).quant_matmul(QuantType::Q8_0, x, w, y);
  return y;
}

TEST(QuantQ8Rows512, EqualsThe256BitRowsBitForBit) {
  const AmxLimit no_amx(false);
  if (const std::string why = missing_vnni512(); !why.empty()) GTEST_SKIP() << why;
  uint32_t seed = 21;
  for (int64_t n : {5, 7, 13, 33})
    for (int64_t blocks : {1, 3, 7, 24})
      for (int64_t m = 1; m <= 7; ++m) {
        std::mt19937 rng(seed++);
        const int64_t k = 32 * blocks;
        const std::vector<uint8_t> bytes = random_rows(n, k, rng);
        const Tensor w = quant::quantized_weight(QuantType::Q8_0, bytes, n, k);
        const Tensor x = activations(m, k, rng);
        const Tensor y256 = product(x, w, n, 256), y512 = product(x, w, n, 512);
        ASSERT_EQ(std::memcmp(y256.data_ptr(), y512.data_ptr(), size_t(m * n) * 4), 0)
            << "m" << m << " n" << n << " k" << k;
      }
}

TEST(QuantQ8Rows512, WithinTheActivationRoundingBoundOfTheFp64Product) {
  const AmxLimit no_amx(false);
  if (const std::string why = missing_vnni512(); !why.empty()) GTEST_SKIP() << why;
  std::mt19937 rng(77);
  const int64_t n = 33, k = 32 * 7, rb = quant::row_bytes(QuantType::Q8_0, k);
  double worst = 0;
  for (int64_t m : {1, 3}) {
    const std::vector<uint8_t> bytes = random_rows(n, k, rng);
    const Tensor w = quant::quantized_weight(QuantType::Q8_0, bytes, n, k);
    const Tensor x = activations(m, k, rng);
    const Tensor y = product(x, w, n, 512);
    const float* xp = x.data<float>();
    std::vector<double> wd(static_cast<size_t>(k));
    for (int64_t j = 0; j < n; ++j) {
      quant::dequantize_row(QuantType::Q8_0, bytes.data() + j * rb, wd.data(), k);
      for (int64_t i = 0; i < m; ++i) {
        double want = 0, rounding = 0, arithmetic = 0;
        for (int64_t g = 0; g < k / 32; ++g) {
          double amax = 0, wsum = 0;
          for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
            want += double(xp[i * k + c]) * wd[size_t(c)];
            amax = std::max(amax, std::abs(double(xp[i * k + c])));
            wsum += std::abs(wd[size_t(c)]);
          }
          rounding += amax / 254 * wsum;
          arithmetic += amax * wsum;
        }
        const double got = y.data<float>()[i * n + j];
        if (rounding == 0) {
          ASSERT_EQ(got, 0.0);
          continue;
        }
        ASSERT_LE(std::abs(got - want), rounding * (1 + 1e-4) + 1e-5 * arithmetic)
            << "m" << m << " row " << i << " col " << j;
        worst = std::max(worst, std::abs(got - want) / rounding);
      }
    }
  }
  EXPECT_GT(worst, 1e-3);  // the bound is not loose by orders of magnitude
}

}  // namespace
}  // namespace tessel::kernels
