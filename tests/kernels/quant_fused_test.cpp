// SPDX-License-Identifier: Apache-2.0
// The 4- to 6-bit formats (Q4_0, Q4_K, Q5_K, Q6_K), whose codes the quantized matmul unpacks
// inside its integer dot product (kernels/cpu/quant_fused.h), on blocks of random bytes (every
// code, every 6-bit scale and min, Q6_K's signed scales -128..127) with chosen f16 scales:
// ordinary, near f16's largest, subnormal, and zero blocks. On every kernel set this CPU runs,
// each output is checked against the fp64 product with the exactly dequantized weights, within
// the bound of the kernel's one approximation, the activations rounded to int8 per 32-element
// block (docs/KERNELS.md, "Accuracy"):
//   |y - y_ref| <= sum_g (max|x_g| / 254) * sum_{j in g} |w_j|          (x codes within step/2)
//                  + 1e-5 * sum_g max|x_g| * sum_{j in g} (|w_j| + 2 |o_j|)   (f32 arithmetic)
// with o_j the zero point of weight j's block (8d, dmin * m, 32 d sc) that the kernel subtracts
// separately. Rows of zero activations and zero weight blocks give exact zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/quant_dot_limits.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/quant_format.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;
using testing_limits::AmxLimit;

constexpr QuantType kFused[] = {QuantType::Q4_0, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K};

enum class Scales { Ordinary, Huge, Subnormal, SomeZeroBlocks };

// Byte offsets of the f16 fields in a block, and the block's size.
std::vector<int> half_fields(QuantType t) {
  if (t == QuantType::Q4_0) return {0};
  if (t == QuantType::Q6_K) return {208};
  return {0, 2};  // Q4_K, Q5_K: d, dmin
}

std::vector<uint8_t> random_rows(QuantType t, int64_t n, int64_t k, Scales kind,
                                 std::mt19937& rng) {
  const int64_t rb = quant::row_bytes(t, k);
  const int64_t block_bytes = quant::row_bytes(t, quant::block_elements(t));
  std::vector<uint8_t> bytes(size_t(n * rb));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = uint8_t(byte(rng));
  std::uniform_real_distribution<float> mag(1e-3f, 0.1f);
  std::uniform_int_distribution<int> sub(1, 0x3FF), coin(0, 1);
  for (int64_t at = 0; at < n * rb; at += block_bytes) {
    const bool zero_block = kind == Scales::SomeZeroBlocks && coin(rng) == 0;
    if (zero_block) std::memset(bytes.data() + at, 0, size_t(block_bytes));  // codes 0 too
    for (int off : half_fields(t)) {
      uint16_t h = 0;
      if (zero_block)
        h = 0;
      else if (kind == Scales::Subnormal)
        h = uint16_t(sub(rng) | (coin(rng) << 15));
      else if (kind == Scales::Huge)
        h = float_to_f16(coin(rng) ? 60000.0f : -65504.0f).bits;
      else
        h = float_to_f16(coin(rng) ? mag(rng) : -mag(rng)).bits;
      std::memcpy(bytes.data() + at + off, &h, 2);
    }
  }
  return bytes;
}

// |o_j| for every weight of one row: the zero point the kernel subtracts for weight j's block.
std::vector<double> zero_points(QuantType t, const uint8_t* row, int64_t k) {
  std::vector<double> o(static_cast<size_t>(k));
  const int64_t bb = quant::row_bytes(t, quant::block_elements(t));
  auto half = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return double(quant::half_bits_to_float(h));
  };
  for (int64_t j = 0; j < k; ++j) {
    const uint8_t* blk = row + (j / quant::block_elements(t)) * bb;
    const int e = int(j % quant::block_elements(t));
    if (t == QuantType::Q4_0)
      o[size_t(j)] = 8 * std::abs(half(blk));
    else if (t == QuantType::Q6_K)
      o[size_t(j)] = 32 * std::abs(half(blk + 208) * double(int8_t(blk[192 + e / 16])));
    else
      o[size_t(j)] = std::abs(half(blk + 2) * quant::q4k_min(blk + 4, e / 32));
  }
  return o;
}

// Activation rows: Gaussian, one large outlier per block, all zeros, tiny, huge.
Tensor activations(int64_t m, int64_t k, std::mt19937& rng) {
  Tensor x = empty({m, k}, DType::F32);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* p = x.data<float>();
  for (int64_t i = 0; i < m; ++i) {
    const int kind = int(i % 5);
    const float scale = kind == 3 ? 1e-20f : kind == 4 ? 1e10f : 1.0f;
    for (int64_t c = 0; c < k; ++c) {
      float v = kind == 2 ? 0.0f : normal(rng) * scale;
      if (kind == 1 && c % 32 == 7) v *= 300.0f;
      p[i * k + c] = v;
    }
  }
  return x;
}

struct Check {
  double worst_ratio = 0;  // largest |y - y_ref| / (rounding bound), over the non-zero outputs
  int64_t outputs = 0;
};

void check_product(KernelSet set, QuantType t, int64_t m, int64_t n, int64_t k, Scales kind,
                   uint32_t seed, Check& stats) {
  std::mt19937 rng(seed);
  const std::vector<uint8_t> bytes = random_rows(t, n, k, kind, rng);
  const Tensor x = activations(m, k, rng);
  Tensor w = quant::quantized_weight(t, bytes, n, k);
  Tensor y = full({m, n}, 7.0, DType::F32);
  cpu_backend_for(set).quant_matmul(t, x, w, y);
  const int64_t rb = quant::row_bytes(t, k);
  std::vector<double> wd(static_cast<size_t>(k));
  const float* xp = x.data<float>();
  for (int64_t j = 0; j < n; ++j) {
    quant::dequantize_row(t, bytes.data() + j * rb, wd.data(), k);
    const std::vector<double> o = zero_points(t, bytes.data() + j * rb, k);
    for (int64_t i = 0; i < m; ++i) {
      double want = 0, rounding = 0, arithmetic = 0;
      for (int64_t g = 0; g < k / 32; ++g) {
        double amax = 0, wsum = 0, osum = 0;
        for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
          want += double(xp[i * k + c]) * wd[size_t(c)];
          amax = std::max(amax, std::abs(double(xp[i * k + c])));
          wsum += std::abs(wd[size_t(c)]);
          osum += o[size_t(c)];
        }
        rounding += amax / 254 * wsum;
        arithmetic += amax * (wsum + 2 * osum);
      }
      const double got = y.data<float>()[i * n + j];
      const std::string where =
          std::string(kernel_set_name(set)) + " " + std::string(quant::quant_type_name(t)) + " m" +
          std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k) + " kind " +
          std::to_string(int(kind)) + " row " + std::to_string(i) + " col " + std::to_string(j);
      if (rounding == 0) {  // zero activations or an all-zero weight row: exactly zero
        ASSERT_EQ(got, 0.0) << where;
        continue;
      }
      const double bound = rounding * (1 + 1e-4) + 1e-5 * arithmetic;
      ASSERT_LE(std::abs(got - want), bound) << where << ": got " << got << " want " << want;
      stats.worst_ratio = std::max(stats.worst_ratio, std::abs(got - want) / rounding);
      ++stats.outputs;
    }
  }
}

TEST(QuantFused, RandomBlocksWithinTheActivationRoundingBound) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 kernels, not quant_amx_k.cpp
  uint32_t seed = 1;
  for (KernelSet set : runnable_kernel_sets()) {
    for (QuantType t : kFused) {
      Check stats;
      const int64_t kb = quant::block_elements(t);
      const int64_t ks[] = {kb, 3 * kb, kb == 256 ? 5 * kb : 33 * kb};
      const int64_t ns[] = {7, 13, 33};
      const int64_t ms[] = {1, 2, 3, 5, 8, 13};
      for (Scales kind :
           {Scales::Ordinary, Scales::Huge, Scales::Subnormal, Scales::SomeZeroBlocks})
        for (int64_t k : ks)
          for (size_t a = 0; a < std::size(ns); ++a) {
            const int64_t m = ms[(a + size_t(k / kb) + size_t(kind)) % std::size(ms)];
            check_product(set, t, m, ns[a], k, kind, seed++, stats);
            if (::testing::Test::HasFatalFailure()) return;
          }
      EXPECT_GT(stats.outputs, 0);
      // The bound is not loose by orders of magnitude: the rounding errors are independent, so
      // their sum is a fraction of the worst case, but not a vanishing one.
      EXPECT_GT(stats.worst_ratio, 1e-3)
          << kernel_set_name(set) << " " << quant::quant_type_name(t);
      std::printf("%s %s: %lld outputs, worst |error| / rounding bound %.3f\n",
                  std::string(kernel_set_name(set)).c_str(),
                  std::string(quant::quant_type_name(t)).c_str(), (long long)stats.outputs,
                  stats.worst_ratio);
    }
  }
}

// Every row of a product equals the same row computed alone (m = 1), and every output column the
// same weight row multiplied alone (n = 1: no group of rows to share the pass with), on every set:
// the fused kernels give each output one fixed sequence of operations.
TEST(QuantFused, RowsAloneEqualRowsInABatch) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 kernels, not quant_amx_k.cpp
  for (KernelSet set : runnable_kernel_sets())
    for (QuantType t : kFused) {
      std::mt19937 rng(uint32_t(int(t) + 100));
      const int64_t n = 13, k = 3 * quant::block_elements(t), m = 7;
      const std::vector<uint8_t> bytes = random_rows(t, n, k, Scales::Ordinary, rng);
      Tensor w = quant::quantized_weight(t, bytes, n, k);
      const Tensor x = activations(m, k, rng);
      Tensor y = zeros({m, n}, DType::F32);
      cpu_backend_for(set).quant_matmul(t, x, w, y);
      for (int64_t i = 0; i < m; ++i) {
        Tensor xi = empty({1, k}, DType::F32), yi = zeros({1, n}, DType::F32);
        std::memcpy(xi.data_ptr(), x.data<float>() + i * k, size_t(k) * 4);
        cpu_backend_for(set).quant_matmul(t, xi, w, yi);
        EXPECT_EQ(std::memcmp(yi.data_ptr(), y.data<float>() + i * n, size_t(n) * 4), 0)
            << kernel_set_name(set) << " " << quant::quant_type_name(t) << " row " << i;
      }
      const int64_t rb = quant::row_bytes(t, k);
      for (int64_t j = 0; j < n; ++j) {
        Tensor wj = quant::quantized_weight(
            t, std::span<const uint8_t>(bytes.data() + j * rb, size_t(rb)), 1, k);
        Tensor yj = zeros({m, 1}, DType::F32);
        cpu_backend_for(set).quant_matmul(t, x, wj, yj);
        for (int64_t i = 0; i < m; ++i)
          EXPECT_EQ(std::memcmp(yj.data<float>() + i, y.data<float>() + i * n + j, 4), 0)
              << kernel_set_name(set) << " " << quant::quant_type_name(t) << " weight row " << j
              << " alone, activation row " << i;
      }
    }
}

}  // namespace
}  // namespace tessel::kernels
