// SPDX-License-Identifier: Apache-2.0
// What the quantized product kernels' tests (the Q8_0 VNNI/AVX2 and AMX tiles, Q4_0's AMX tiles,
// the k-quant tiles) share: random activations, Q8_0's random and extreme weights, Q4_0's random
// ones, and the fp64 check every Q8_0 and Q4_0 kernel passes: each output within the rounding of
// its activations to int8 per 32-block, sum_g (max|x_g| / 254) sum_{j in g} |w_j|, plus 1e-5 sum_g
// max|x_g| sum_{j in g} |w_j| for the f32 arithmetic (docs/KERNELS.md, "Accuracy"). One copy, so
// the kernels are held to the same bound on the same data.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/tensor/tensor.h"

namespace tessel::kernels::testing_quant {

// y [m, n] = x W^T through `backend`, W the n rows `bytes` of `type` (k = x's columns).
inline Tensor backend_product(Backend& backend, quant::QuantType type, const Tensor& x,
                              const std::vector<uint8_t>& bytes, int64_t n) {
  Tensor y = zeros({x.size(0), n}, x.dtype());
  backend.quant_matmul(type, x, quant::quantized_weight(type, bytes, n, x.size(1)), y);
  return y;
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// n rows of k / 32 Q8_0 blocks: every code -128..127, f16 scales of both signs.
inline std::vector<uint8_t> random_q8_0(int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<quant::BlockQ8_0> blocks(static_cast<size_t>(n * k / 32));
  std::uniform_int_distribution<int> code(-128, 127), coin(0, 1);
  std::uniform_real_distribution<float> mag(1e-3f, 0.1f);
  for (auto& b : blocks) {
    b.d = float_to_f16(coin(rng) ? mag(rng) : -mag(rng)).bits;
    for (auto& q : b.qs) q = int8_t(code(rng));
  }
  std::vector<uint8_t> bytes(blocks.size() * sizeof(quant::BlockQ8_0));
  std::memcpy(bytes.data(), blocks.data(), bytes.size());
  return bytes;
}

// Codes -128 and 127 alternating, d = 1, in n rows of k; with extreme_activations every product
// is exact: row i of x times any weight row is all_positive (even i) or mixed (odd i).
inline std::vector<uint8_t> extreme_q8_0(int64_t n, int64_t k) {
  std::vector<quant::BlockQ8_0> blocks(static_cast<size_t>(n * k / 32));
  for (auto& b : blocks) {
    b.d = 0x3C00;
    for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(j % 2 ? 127 : -128);
  }
  std::vector<uint8_t> bytes(blocks.size() * sizeof(quant::BlockQ8_0));
  std::memcpy(bytes.data(), blocks.data(), bytes.size());
  return bytes;
}

// Activations of +-1 that round to +-127 exactly: even rows alternate in sign with the codes,
// odd rows are all -1.
inline Tensor extreme_activations(int64_t m, int64_t k) {
  Tensor x = empty({m, k}, DType::F32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c)
      x.data<float>()[i * k + c] = i % 2 ? -1.0f : (c % 2 ? 1.0f : -1.0f);
  return x;
}

// The exact value of every output of extreme_q8_0 x extreme_activations, by row parity.
inline double extreme_product(int64_t k, int64_t row) {
  return row % 2 ? double(k / 2) * (128 - 127) : double(k / 2) * (128 + 127);
}

// Gaussian rows, every fifth one with an outlier per block, and a zero row.
inline Tensor activations(int64_t m, int64_t k, std::mt19937& rng) {
  Tensor x = empty({m, k}, DType::F32);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* p = x.data<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c) {
      float v = i % 11 == 2 ? 0.0f : normal(rng);
      if (i % 5 == 1 && c % 32 == 7) v *= 300.0f;
      p[i * k + c] = v;
    }
  return x;
}

// Activations whose rounding to int8 per 32-element block is exact: int8 codes times a power of
// two per block, with a +-127 in every block (row i's at column i % 32 of the block), so a test
// can write a kernel's integer arithmetic out. xq: the codes [m, k]; dx: the block scales [m, k /
// 32].
struct ExactActivations {
  std::vector<int> xq;
  std::vector<float> dx;
  Tensor x;
};
inline ExactActivations exact_activations(int64_t m, int64_t k, std::mt19937& rng) {
  std::uniform_int_distribution<int> code(-127, 127), exponent(-9, 3);
  const int64_t blocks = k / 32;
  ExactActivations a{std::vector<int>(size_t(m * k)), std::vector<float>(size_t(m * blocks)),
                     empty({m, k}, DType::F32)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < blocks; ++g) {
      a.dx[size_t(i * blocks + g)] = std::ldexp(1.0f, exponent(rng));
      for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
        int q = code(rng);
        if (c == 32 * g + int64_t(i % 32)) q = i % 2 ? 127 : -127;
        a.xq[size_t(i * k + c)] = q;
        a.x.data<float>()[i * k + c] = float(q) * a.dx[size_t(i * blocks + g)];
      }
    }
  return a;
}

// n rows of k / 32 Q4_0 blocks: every code 0..15 (random bytes), f16 scales of both signs.
inline std::vector<uint8_t> random_q4_0(int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<quant::BlockQ4_0> blocks(static_cast<size_t>(n * k / 32));
  std::uniform_int_distribution<int> byte(0, 255), coin(0, 1);
  std::uniform_real_distribution<float> mag(1e-3f, 0.1f);
  for (auto& b : blocks) {
    b.d = float_to_f16(coin(rng) ? mag(rng) : -mag(rng)).bits;
    for (auto& q : b.qs) q = uint8_t(byte(rng));
  }
  std::vector<uint8_t> bytes(blocks.size() * sizeof(quant::BlockQ4_0));
  std::memcpy(bytes.data(), blocks.data(), bytes.size());
  return bytes;
}

// y [m, n] = x [m, k] times the rows `bytes` of a 32-block format (Q8_0, Q4_0; n rows of k)
// transposed, checked against fp64 on the exactly dequantized weights; `worst_ratio` takes the
// largest |y - fp64| / rounding bound seen (to show the bound is not loose).
inline ::testing::AssertionResult within_fp64_bound(quant::QuantType type,
                                                    const std::vector<uint8_t>& bytes,
                                                    const Tensor& x, const Tensor& y, int64_t m,
                                                    int64_t n, int64_t k, double& worst_ratio) {
  const int64_t rb = quant::row_bytes(type, k);
  std::vector<double> wd(static_cast<size_t>(k));
  const float* xp = x.data<float>();
  for (int64_t j = 0; j < n; ++j) {
    quant::dequantize_row(type, bytes.data() + j * rb, wd.data(), k);
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
        if (got != 0.0)
          return ::testing::AssertionFailure()
                 << "row " << i << " col " << j << ": got " << got << " for an all-zero product";
        continue;
      }
      if (std::abs(got - want) > rounding * (1 + 1e-4) + 1e-5 * arithmetic)
        return ::testing::AssertionFailure()
               << "row " << i << " col " << j << ": got " << got << " want " << want
               << " (rounding bound " << rounding << ")";
      worst_ratio = std::max(worst_ratio, std::abs(got - want) / rounding);
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult q8_0_within_fp64_bound(const std::vector<uint8_t>& bytes,
                                                         const Tensor& x, const Tensor& y,
                                                         int64_t m, int64_t n, int64_t k,
                                                         double& worst_ratio) {
  return within_fp64_bound(quant::QuantType::Q8_0, bytes, x, y, m, n, k, worst_ratio);
}

}  // namespace tessel::kernels::testing_quant
