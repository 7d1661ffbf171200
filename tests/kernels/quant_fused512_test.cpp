// SPDX-License-Identifier: Apache-2.0
// The avx512 set's 512-bit fused k-quant rows (kernels/cpu/quant_fused_rows512.h: Q4_K, Q5_K,
// Q6_K, two 32-weight blocks per instruction) against the 256-bit rows they replace, which the
// limit kernel_set.h's limit_quant_vector_bits(256) brings back: every output equal bit for bit
// (the same integer sums, converted and scaled in the same order), under each byte dot product
// this CPU has (AVX-512 VNNI's vpdpbusd, vpmaddubsw + vpmaddwd), at odd sizes (weight rows 7, 13,
// 33: full four-row passes and one-row tails; one to five super-blocks; 1 to 13 activation rows).
// And against the fp64 product with the exactly dequantized weights, within the bound of the
// activations' int8 rounding (quant_fused_test.cpp derives it; docs/KERNELS.md, "Accuracy"):
//   |y - y_ref| <= sum_g (max|x_g| / 254) * sum_{j in g} |w_j| + 1e-5 * sum_g max|x_g| *
//                  sum_{j in g} (|w_j| + 2 |o_j|)
// with o_j the zero point of weight j's block. Skipped, naming the missing feature, on a CPU
// without AVX-512 (F, BW, DQ, VL) or a build without the avx512 set.
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
#include "tessel/kernels/quant/row_interleave.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;
using testing_limits::AmxLimit;

constexpr QuantType kTypes[] = {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K};

// Restores the defaults when a test ends, passed or not.
struct Limits {
  ~Limits() {
    limit_quant_vector_bits(512);
    limit_quant_dot(QuantDot::Avx512Vnni);
    limit_quant_gfni(true);
  }
};

// Why the 512-bit rows cannot run here, or "" when they can.
std::string missing_avx512() {
  const CpuFeatures& f = cpu_features();
  for (auto [has, name] : {std::pair{f.avx512f, "avx512f"},
                           {f.avx512bw, "avx512bw"},
                           {f.avx512dq, "avx512dq"},
                           {f.avx512vl, "avx512vl"}})
    if (!has) return std::string("this CPU lacks ") + name;
  for (KernelSet s : runnable_kernel_sets())
    if (s == KernelSet::Avx512) return "";
  return "the avx512 kernel set was not built (or the OS does not enable it)";
}

// Random rows (every code, scale and min) with ordinary f16 scales, some all-zero blocks.
std::vector<uint8_t> random_rows(QuantType t, int64_t n, int64_t k, std::mt19937& rng) {
  const int64_t rb = quant::row_bytes(t, k), bb = quant::row_bytes(t, 256);
  std::vector<uint8_t> bytes(size_t(n * rb));
  std::uniform_int_distribution<int> byte(0, 255), coin(0, 7);
  std::uniform_real_distribution<float> mag(1e-3f, 0.1f);
  for (auto& b : bytes) b = uint8_t(byte(rng));
  for (int64_t at = 0; at < n * rb; at += bb) {
    if (coin(rng) == 0) {
      std::memset(bytes.data() + at, 0, size_t(bb));
      continue;
    }
    const std::vector<int> fields =
        t == QuantType::Q6_K ? std::vector<int>{208} : std::vector<int>{0, 2};
    for (int off : fields) {
      const uint16_t h = float_to_f16(coin(rng) % 2 ? mag(rng) : -mag(rng)).bits;
      std::memcpy(bytes.data() + at + off, &h, 2);
    }
  }
  return bytes;
}

Tensor activations(int64_t m, int64_t k, std::mt19937& rng) {
  Tensor x = empty({m, k}, DType::F32);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < m * k; ++i)
    x.data<float>()[i] = normal(rng) * (i % 32 == 5 ? 50.0f : 1.0f);
  return x;
}

// |o_j|: the zero point the kernel subtracts for weight j's block.
double zero_point(QuantType t, const uint8_t* row, int64_t j) {
  const uint8_t* blk = row + (j / 256) * quant::row_bytes(t, 256);
  const int e = int(j % 256);
  auto half = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return double(quant::half_bits_to_float(h));
  };
  if (t == QuantType::Q6_K)
    return 32 * std::abs(half(blk + 208) * double(int8_t(blk[192 + e / 16])));
  return std::abs(half(blk + 2) * quant::q4k_min(blk + 4, e / 32));
}

Tensor product(QuantType t, const Tensor& x, const Tensor& w, int64_t n, int bits) {
  limit_quant_vector_bits(bits);
  EXPECT_EQ(quant_vector_bits_for(KernelSet::Avx512), bits);
  Tensor y = full({x.shape()[0], n}, 7.0, DType::F32);
  cpu_backend_for(KernelSet::Avx512).quant_matmul(t, x, w, y);
  return y;
}

TEST(QuantFused512, EqualsThe256BitRowsBitForBit) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 kernels, not quant_amx_k.cpp
  if (const std::string why = missing_avx512(); !why.empty()) GTEST_SKIP() << why;
  Limits restore;
  std::vector<QuantDot> dots = {QuantDot::Avx2};
  if (cpu_features().avx512_vnni) dots.insert(dots.begin(), QuantDot::Avx512Vnni);
  uint32_t seed = 11;
  for (QuantDot dot : dots) {
    limit_quant_dot(dot);
    for (QuantType t : kTypes)
      for (int64_t n : {7, 13, 33})
        for (int64_t blocks : {1, 3, 5})
          for (int64_t m : {1, 2, 3, 13}) {
            std::mt19937 rng(seed++);
            const int64_t k = 256 * blocks;
            const std::vector<uint8_t> bytes = random_rows(t, n, k, rng);
            const Tensor w = quant::quantized_weight(t, bytes, n, k);
            const Tensor x = activations(m, k, rng);
            const Tensor y256 = product(t, x, w, n, 256), y512 = product(t, x, w, n, 512);
            ASSERT_EQ(std::memcmp(y256.data_ptr(), y512.data_ptr(), size_t(m * n) * 4), 0)
                << quant_dot_name(dot) << " " << quant::quant_type_name(t) << " m" << m << " n" << n
                << " k" << k;
          }
  }
}

// The Q4_K and Q5_K decode rows with each chunk's nibbles taken by one GFNI byte transform
// (kernel_set.h's quant_nibbles_gfni, on by default where the CPU has GFNI) against the
// shift-and-mask form: the same code bytes, so every output equal bit for bit, in the file's rows
// and in the layout of four rows interleaved, under each byte dot product, at 1-3 activation rows
// (the direct rows) and 5 and 7 (the rows).
TEST(QuantFused512, GfniNibblesEqualTheShiftAndMaskBitForBit) {
  const AmxLimit no_amx(false);
  if (const std::string why = missing_avx512(); !why.empty()) GTEST_SKIP() << why;
  if (!cpu_features().gfni) GTEST_SKIP() << "this CPU lacks gfni";
  Limits restore;
  std::vector<QuantDot> dots = {QuantDot::Avx2};
  if (cpu_features().avx512_vnni) dots.insert(dots.begin(), QuantDot::Avx512Vnni);
  uint32_t seed = 900;
  for (QuantDot dot : dots) {
    limit_quant_dot(dot);
    for (QuantType plain : {QuantType::Q4_K, QuantType::Q5_K})
      for (int64_t n : {7, 13, 33})
        for (int64_t blocks : {1, 3, 5})
          for (int64_t m : {1, 2, 3, 5, 7}) {
            std::mt19937 rng(seed++);
            const int64_t k = 256 * blocks;
            const std::vector<uint8_t> bytes = random_rows(plain, n, k, rng);
            std::vector<uint8_t> grouped(bytes.size());
            quant::interleave_rows(plain, bytes.data(), n, k, grouped.data());
            const Tensor x = activations(m, k, rng);
            for (QuantType t : {plain, quant::interleaved_form(plain)}) {
              const Tensor w = quant::quantized_weight(t, t == plain ? bytes : grouped, n, k);
              limit_quant_gfni(false);
              ASSERT_FALSE(quant_nibbles_gfni());
              const Tensor shifted = product(t, x, w, n, 512);
              limit_quant_gfni(true);
              ASSERT_TRUE(quant_nibbles_gfni());
              const Tensor gfni = product(t, x, w, n, 512);
              ASSERT_EQ(std::memcmp(shifted.data_ptr(), gfni.data_ptr(), size_t(m * n) * 4), 0)
                  << quant_dot_name(dot) << " " << quant::quant_type_name(t) << " m" << m << " n"
                  << n << " k" << k;
            }
          }
  }
}

TEST(QuantFused512, WithinTheActivationRoundingBoundOfTheFp64Product) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 kernels, not quant_amx_k.cpp
  if (const std::string why = missing_avx512(); !why.empty()) GTEST_SKIP() << why;
  Limits restore;
  uint32_t seed = 500;
  for (QuantType t : kTypes) {
    double worst = 0;
    for (int64_t n : {7, 13, 33}) {
      std::mt19937 rng(seed++);
      const int64_t m = 3, k = 256 * (n == 33 ? 5 : 3);
      const std::vector<uint8_t> bytes = random_rows(t, n, k, rng);
      const Tensor w = quant::quantized_weight(t, bytes, n, k);
      const Tensor x = activations(m, k, rng);
      const Tensor y = product(t, x, w, n, 512);
      const int64_t rb = quant::row_bytes(t, k);
      const float* xp = x.data<float>();
      std::vector<double> wd(static_cast<size_t>(k));
      for (int64_t j = 0; j < n; ++j) {
        quant::dequantize_row(t, bytes.data() + j * rb, wd.data(), k);
        for (int64_t i = 0; i < m; ++i) {
          double want = 0, rounding = 0, arithmetic = 0;
          for (int64_t g = 0; g < k / 32; ++g) {
            double amax = 0, wsum = 0, osum = 0;
            for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
              want += double(xp[i * k + c]) * wd[size_t(c)];
              amax = std::max(amax, std::abs(double(xp[i * k + c])));
              wsum += std::abs(wd[size_t(c)]);
              osum += zero_point(t, bytes.data() + j * rb, c);
            }
            rounding += amax / 254 * wsum;
            arithmetic += amax * (wsum + 2 * osum);
          }
          const double got = y.data<float>()[i * n + j];
          if (rounding == 0) {  // an all-zero weight row: exactly zero
            ASSERT_EQ(got, 0.0);
            continue;
          }
          ASSERT_LE(std::abs(got - want), rounding * (1 + 1e-4) + 1e-5 * arithmetic)
              << quant::quant_type_name(t) << " n" << n << " row " << i << " col " << j;
          worst = std::max(worst, std::abs(got - want) / rounding);
        }
      }
    }
    // The bound is not loose by orders of magnitude.
    EXPECT_GT(worst, 1e-3) << quant::quant_type_name(t);
  }
}

}  // namespace
}  // namespace tessel::kernels
