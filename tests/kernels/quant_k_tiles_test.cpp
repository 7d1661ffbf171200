// SPDX-License-Identifier: Apache-2.0
// Q4_K, Q5_K and Q6_K products of a prompt's size, which the quantized matmul runs in register
// tiles (kernels/cpu/quant_k_tiles.h, quant_k_tiles512.h) from 8 activation rows on; fewer rows
// take the fused row kernels. On every kernel set this CPU runs, under every byte dot product it
// has (vpmaddubsw, AVX-VNNI, AVX-512 VNNI, through limit_quant_dot) and both of the avx512 set's
// vector widths (limit_quant_vector_bits): each output within the activation rounding bound of
// the fp64 product with the exactly dequantized weight (quant_fused512_test.cpp's bound,
// docs/KERNELS.md "Accuracy"); every row the same bits alone (m = 1, the row kernels) as inside
// products of odd sizes (full tiles, single-row remainders, single weight rows, more rows than
// one L2 chunk); the same bits under every dot product and width; and the extreme codes (0 and
// the largest, against +-127, with the largest and smallest scales) exact through the tiles.
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

constexpr QuantType kTypes[] = {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K};

void put_half(uint8_t* p, float v) {
  const uint16_t h = float_to_f16(v).bits;
  std::memcpy(p, &h, 2);
}

// Random rows (every code, scale and min) with f16 scales of both signs, some all-zero blocks.
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
    for (int off : t == QuantType::Q6_K ? std::vector<int>{208} : std::vector<int>{0, 2})
      put_half(bytes.data() + at + off, coin(rng) % 2 ? mag(rng) : -mag(rng));
  }
  return bytes;
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

Tensor product(KernelSet set, QuantType t, const Tensor& x, const Tensor& w, int64_t n) {
  Tensor y = full({x.size(0), n}, 7.0, DType::F32);
  cpu_backend_for(set).quant_matmul(t, x, w, y);
  return y;
}

std::string where(KernelSet set, QuantDot dot, QuantType t, int64_t m, int64_t n, int64_t k) {
  return std::string(kernel_set_name(set)) + " " + std::string(quant_dot_name(dot)) + " " +
         std::to_string(quant_vector_bits_for(set)) + "-bit " +
         std::string(quant::quant_type_name(t)) + " m" + std::to_string(m) + " n" +
         std::to_string(n) + " k" + std::to_string(k);
}

struct Shape {
  int64_t m, n, k;
};
constexpr Shape kShapes[] = {{1, 13, 256},
                             {7, 33, 512},
                             {13, 7, 768},
                             {33, 13, 256},
                             {97, 7, 512},
                             // more rows than one L2 chunk of activation codes (128 at k = 4096)
                             {133, 5, 4096}};

// |y - y_ref| <= sum_g (max|x_g| / 254) sum_{j in g} |w_j| (the activation codes are within half
// a step) + 1e-5 sum_g max|x_g| sum_{j in g} (|w_j| + 2 |o_j|) (f32 arithmetic).
TEST(QuantKTiles, WithinTheActivationRoundingBoundOfFp64) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 kernels, not quant_amx_k.cpp
  uint32_t seed = 3;
  for (QuantType t : kTypes)
    for (const Shape& s : kShapes) {
      std::mt19937 rng(seed++);
      const std::vector<uint8_t> bytes = random_rows(t, s.n, s.k, rng);
      const Tensor w = quant::quantized_weight(t, bytes, s.n, s.k);
      const Tensor x = activations(s.m, s.k, rng);
      const int64_t rb = quant::row_bytes(t, s.k);
      const float* xp = x.data<float>();
      std::vector<double> want(size_t(s.m * s.n)), rounding(want.size()), arithmetic(want.size());
      std::vector<double> wd(size_t(s.k));
      for (int64_t j = 0; j < s.n; ++j) {
        quant::dequantize_row(t, bytes.data() + j * rb, wd.data(), s.k);
        for (int64_t i = 0; i < s.m; ++i) {
          const size_t o = size_t(i * s.n + j);
          for (int64_t g = 0; g < s.k / 32; ++g) {
            double amax = 0, wsum = 0, osum = 0;
            for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
              want[o] += double(xp[i * s.k + c]) * wd[size_t(c)];
              amax = std::max(amax, std::abs(double(xp[i * s.k + c])));
              wsum += std::abs(wd[size_t(c)]);
              osum += zero_point(t, bytes.data() + j * rb, c);
            }
            rounding[o] += amax / 254 * wsum;
            arithmetic[o] += amax * (wsum + 2 * osum);
          }
        }
      }
      for (KernelSet set : runnable_kernel_sets())
        for (int bits : {512, 256})
          for (QuantDot dot : dots_here()) {
            DotLimit limit(dot);
            BitsLimit width(bits);
            const Tensor y = product(set, t, x, w, s.n);
            double worst = 0;
            for (size_t o = 0; o < want.size(); ++o) {
              const double got = y.data<float>()[o];
              if (rounding[o] == 0) {  // a zero activation row or an all-zero weight row
                ASSERT_EQ(got, 0.0) << where(set, dot, t, s.m, s.n, s.k) << " at " << o;
                continue;
              }
              ASSERT_LE(std::abs(got - want[o]), rounding[o] * (1 + 1e-4) + 1e-5 * arithmetic[o])
                  << where(set, dot, t, s.m, s.n, s.k) << " row " << o / size_t(s.n) << " col "
                  << o % size_t(s.n) << ": got " << got << " want " << want[o];
              worst = std::max(worst, std::abs(got - want[o]) / rounding[o]);
            }
            // Not loose by orders of magnitude: the rounding errors add up to a fair share of it.
            EXPECT_GT(worst, 1e-3) << where(set, dot, t, s.m, s.n, s.k);
          }
    }
}

// Row i of every product is the bits of row i alone (m = 1: the row kernels), under every dot
// product and width, and the whole product is the same bits under all of them.
TEST(QuantKTiles, RowsAloneEqualRowsInAPromptUnderEveryDot) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 kernels, not quant_amx_k.cpp
  for (QuantType t : kTypes)
    for (KernelSet set : runnable_kernel_sets())
      for (const Shape& s : kShapes) {
        if (s.m == 1) continue;
        std::mt19937 rng(uint32_t(s.m * 1000 + s.n + s.k + int(t)));
        const std::vector<uint8_t> bytes = random_rows(t, s.n, s.k, rng);
        const Tensor w = quant::quantized_weight(t, bytes, s.n, s.k);
        const Tensor x = activations(s.m, s.k, rng);
        Tensor first;
        for (int bits : {512, 256})
          for (QuantDot dot : dots_here()) {
            DotLimit limit(dot);
            BitsLimit width(bits);
            const Tensor y = product(set, t, x, w, s.n);
            for (int64_t i = 0; i < s.m; ++i) {
              Tensor xi = empty({1, s.k}, DType::F32);
              std::memcpy(xi.data_ptr(), x.data<float>() + i * s.k, size_t(s.k) * 4);
              const Tensor yi = product(set, t, xi, w, s.n);
              ASSERT_EQ(std::memcmp(yi.data_ptr(), y.data<float>() + i * s.n, size_t(s.n) * 4), 0)
                  << where(set, dot, t, s.m, s.n, s.k) << " row " << i;
            }
            if (!first.defined()) {
              first = y;
            } else {
              EXPECT_EQ(std::memcmp(first.data_ptr(), y.data_ptr(), size_t(s.m * s.n) * 4), 0)
                  << where(set, dot, t, s.m, s.n, s.k) << " against 512-bit "
                  << quant_dot_name(dots_here()[0]);
            }
          }
      }
}

// Every code 0 or the largest (15, 31, 63) with the largest scales (Q4_K / Q5_K: scale and min
// 63; Q6_K: 127 and -128) against activations that round to +-127 exactly (dx = 2^-7): every
// partial sum is a short dyadic number, so the products equal the fp64 ones exactly through the
// tiles and their remainders, whatever the dot product.
TEST(QuantKTiles, ExtremeCodesAreExactInTiles) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 kernels, not quant_amx_k.cpp
  constexpr int64_t k = 512, n = 5, m = 11;
  for (QuantType t : kTypes) {
    const int64_t bb = quant::row_bytes(t, 256);
    std::vector<uint8_t> bytes(size_t(n * quant::row_bytes(t, k)));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t b = 0; b < k / 256; ++b) {
        uint8_t* p = bytes.data() + (j * (k / 256) + b) * bb;
        const bool top = j % 2 == 0;  // the largest code, or 0
        if (t == QuantType::Q6_K) {
          std::memset(p, top ? 0xFF : 0, 192);  // ql and qh
          std::memset(p + 192, j % 4 < 2 ? 127 : 0x80, 16);
          put_half(p + 208, 1.0f / 64);
        } else {
          put_half(p, 1.0f / 64);
          put_half(p + 2, 1.0f / 64);
          std::memset(p + 4, 0xFF, 12);  // every scale and min 63
          if (t == QuantType::Q5_K) std::memset(p + 16, top ? 0xFF : 0, 32);
          std::memset(p + (t == QuantType::Q5_K ? 48 : 16), top ? 0xFF : 0, 128);
        }
      }
    const Tensor w = quant::quantized_weight(t, bytes, n, k);
    Tensor x = empty({m, k}, DType::F32);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < k; ++c)
        x.data<float>()[i * k + c] = (i % 3 == 2 && c % 2 ? -1.0f
                                      : i % 2             ? -1.0f
                                                          : 1.0f) *
                                     (127.0f / 128.0f);
    std::vector<double> wd(static_cast<size_t>(k)), want(static_cast<size_t>(m * n));
    for (int64_t j = 0; j < n; ++j) {
      quant::dequantize_row(t, bytes.data() + j * quant::row_bytes(t, k), wd.data(), k);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < k; ++c)
          want[size_t(i * n + j)] += double(x.data<float>()[i * k + c]) * wd[size_t(c)];
    }
    for (KernelSet set : runnable_kernel_sets())
      for (int bits : {512, 256})
        for (QuantDot dot : dots_here()) {
          DotLimit limit(dot);
          BitsLimit width(bits);
          const Tensor y = product(set, t, x, w, n);
          for (int64_t o = 0; o < m * n; ++o)
            ASSERT_EQ(double(y.data<float>()[o]), want[size_t(o)])
                << where(set, dot, t, m, n, k) << " row " << o / n << " col " << o % n;
        }
  }
}

}  // namespace
}  // namespace tessel::kernels
