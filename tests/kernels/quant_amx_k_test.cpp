// SPDX-License-Identifier: Apache-2.0
// Q4_K, Q5_K and Q6_K products on AMX-INT8 tiles (kernels/cpu/quant_amx_k.cpp,
// quant_amx_q6_k.cpp), through the avx512
// set's quantized matmul with the tiles switched on. Skipped, naming what is missing, where this
// CPU or kernel has no AMX-INT8 (or TESSEL_QUANT_AMX=off). Checked: every output within the
// activation rounding bound of the fp64 product with the exactly dequantized weight, at odd sizes
// (1 to 97 activation rows: few_rows below 4, tiles and partial tiles above; 5 to 33 weight rows;
// one to sixteen super-blocks, more rows than one L2 chunk); every output exactly the documented
// order (Q4_K / Q5_K: per block fma(f32(S), f32(d sc) * dx, acc), then acc - f32(dmin mn) * xs
// as one fma; Q6_K: per half block fma(f32(S), f32(d sc) * dx, acc)) on activations that round to
// int8 without error; every row the same bits alone as inside a product of any size; the extreme
// codes, scales and mins exact; and the switch: off gives the VNNI kernels' bits.
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
#include "tessel/kernels/quant_amx.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;
using testing_limits::AmxLimit;
using testing_quant::activations;
using testing_quant::exact_activations;
using testing_quant::ExactActivations;

#define SKIP_WITHOUT_AMX()                                 \
  if (!quant_amx_enabled() || !cpu_features().x86_64_v4()) \
  GTEST_SKIP() << "no AMX-INT8 tiles here: " << quant_amx_status()

constexpr QuantType kTypes[] = {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K};

void put_half(uint8_t* p, float v) {
  const uint16_t h = float_to_f16(v).bits;
  std::memcpy(p, &h, 2);
}

float get_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return quant::half_bits_to_float(h);
}

// Random rows (every code, scale and min) with f16 d and dmin of both signs, some all-zero
// super-blocks.
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

// The code the kernel multiplies for weight e of a row: unsigned (0..15, 0..31) for Q4_K / Q5_K,
// less its zero point 32 for Q6_K.
int code(QuantType t, const uint8_t* row, int64_t e) {
  const int64_t bb = quant::row_bytes(t, 256);
  const uint8_t* blk = row + (e / 256) * bb;
  if (t == QuantType::Q6_K)
    return quant::q6k_code(*reinterpret_cast<const quant::BlockQ6_K*>(blk), int(e % 256)) - 32;
  if (t == QuantType::Q4_K)
    return quant::q4k_code(*reinterpret_cast<const quant::BlockQ4_K*>(blk), int(e % 256));
  return quant::q5k_code(*reinterpret_cast<const quant::BlockQ5_K*>(blk), int(e % 256));
}

// |o_j|: the zero point of weight j (dmin mn of Q4_K / Q5_K, 32 d sc of Q6_K).
double zero_point(QuantType t, const uint8_t* row, int64_t j) {
  const uint8_t* blk = row + (j / 256) * quant::row_bytes(t, 256);
  const int e = int(j % 256);
  if (t == QuantType::Q6_K)
    return 32 * std::abs(double(get_half(blk + 208)) * int8_t(blk[192 + e / 16]));
  return std::abs(double(get_half(blk + 2)) * quant::q4k_min(blk + 4, e / 32));
}

// In batch-invariant mode unless told otherwise: outside it, rows below 4 take the VNNI rows.
Tensor product(QuantType t, const Tensor& x, const Tensor& w, int64_t n, bool invariant = true) {
  const BatchInvariantScope mode(invariant);
  Tensor y = full({x.size(0), n}, 7.0, DType::F32);
  cpu_backend_for(KernelSet::Avx512).quant_matmul(t, x, w, y);
  return y;
}

std::string where(QuantType t, int64_t m, int64_t n, int64_t k) {
  return std::string(quant::quant_type_name(t)) + " m" + std::to_string(m) + " n" +
         std::to_string(n) + " k" + std::to_string(k);
}

struct Shape {
  int64_t m, n, k;
};
// m < 4 runs few_rows, m >= 4 the tiles (m % 16: a zero-padded last tile); n % 16: a partial
// group; 133 rows at k = 4096 span two chunks of activation codes (128 rows each); 35 rows of
// k = 4096 are three groups, which the pool's threads share.
constexpr Shape kShapes[] = {{1, 13, 256},   {2, 17, 512}, {3, 5, 768},   {7, 33, 512},
                             {16, 16, 256},  {17, 7, 768}, {33, 13, 256}, {97, 7, 512},
                             {133, 5, 4096}, {5, 35, 4096}};

// |y - y_ref| <= sum_g (max|x_g| / 254) sum_{j in g} |w_j| (the activation codes are within half
// a step) + 1e-5 sum_g max|x_g| sum_{j in g} (|w_j| + 2 |o_j|) (f32 arithmetic), o_j the min
// dmin * mn the kernel subtracts, as quant_k_tiles_test.cpp.
::testing::AssertionResult within_fp64_bound(QuantType t, const std::vector<uint8_t>& bytes,
                                             const Tensor& x, const Tensor& y, int64_t m, int64_t n,
                                             int64_t k, double& worst) {
  const int64_t rb = quant::row_bytes(t, k);
  const float* xp = x.data<float>();
  std::vector<double> wd(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = bytes.data() + j * rb;
    quant::dequantize_row(t, row, wd.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      double want = 0, rounding = 0, arithmetic = 0;
      for (int64_t g = 0; g < k / 32; ++g) {
        double amax = 0, wsum = 0, osum = 0;
        for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
          want += double(xp[i * k + c]) * wd[size_t(c)];
          amax = std::max(amax, std::abs(double(xp[i * k + c])));
          wsum += std::abs(wd[size_t(c)]);
          osum += zero_point(t, row, c);
        }
        rounding += amax / 254 * wsum;
        arithmetic += amax * (wsum + 2 * osum);
      }
      const double got = y.data<float>()[i * n + j];
      if (rounding == 0) {  // a zero activation row or an all-zero weight row
        if (got != 0.0)
          return ::testing::AssertionFailure() << "row " << i << " col " << j << ": got " << got;
        continue;
      }
      if (std::abs(got - want) > rounding * (1 + 1e-4) + 1e-5 * arithmetic)
        return ::testing::AssertionFailure()
               << "row " << i << " col " << j << ": got " << got << " want " << want;
      worst = std::max(worst, std::abs(got - want) / rounding);
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(QuantAmxK, WithinTheActivationRoundingBoundOfFp64) {
  SKIP_WITHOUT_AMX();
  uint32_t seed = 7;
  for (QuantType t : kTypes)
    for (const Shape& s : kShapes) {
      std::mt19937 rng(seed++);
      const std::vector<uint8_t> bytes = random_rows(t, s.n, s.k, rng);
      const Tensor w = quant::quantized_weight(t, bytes, s.n, s.k);
      const Tensor x = activations(s.m, s.k, rng);
      const Tensor y = product(t, x, w, s.n);
      double worst = 0;
      ASSERT_TRUE(within_fp64_bound(t, bytes, x, y, s.m, s.n, s.k, worst))
          << where(t, s.m, s.n, s.k);
      EXPECT_GT(worst, 1e-3) << where(t, s.m, s.n, s.k);  // not loose by orders of magnitude
    }
}

// Every activation row count from 1 to 17 (few_rows below 4, from 4 the tiles, the last partial
// tile only 4, 8 or 12 rows high) in batch-invariant mode: within the fp64 bound above, and every
// row the same bits as the same row inside a 33-row prompt (two whole tiles and a 1-row one).
TEST(QuantAmxK, EveryRowCountUpToSeventeen) {
  SKIP_WITHOUT_AMX();
  uint32_t seed = 11;
  for (QuantType t : kTypes)
    for (int64_t n : {int64_t(13), int64_t(35)}) {
      constexpr int64_t k = 768;
      std::mt19937 rng(seed++);
      const std::vector<uint8_t> bytes = random_rows(t, n, k, rng);
      const Tensor w = quant::quantized_weight(t, bytes, n, k);
      const Tensor prompt = activations(33, k, rng);
      const Tensor whole = product(t, prompt, w, n);
      for (int64_t m = 1; m <= 17; ++m) {
        Tensor x = empty({m, k}, DType::F32);
        std::memcpy(x.data_ptr(), prompt.data_ptr(), size_t(m * k) * 4);
        const Tensor y = product(t, x, w, n);
        double worst = 0;
        EXPECT_TRUE(within_fp64_bound(t, bytes, x, y, m, n, k, worst)) << where(t, m, n, k);
        EXPECT_EQ(std::memcmp(y.data_ptr(), whole.data_ptr(), size_t(m * n) * 4), 0)
            << where(t, m, n, k) << ": rows differ from the same rows in 33";
      }
    }
}

// Activations that are int8 codes times a power of two per block, with a +-127 in every block, so
// the rounding to int8 is exact and the kernel's arithmetic can be written out here.
TEST(QuantAmxK, EqualsTheBlockOrderBitForBit) {
  SKIP_WITHOUT_AMX();
  constexpr Shape kExact[] = {{17, 5, 512}, {33, 19, 256}, {1, 19, 768}, {3, 7, 256}};
  std::mt19937 rng(5);
  for (QuantType t : kTypes)
    for (const Shape& s : kExact) {
      const int64_t blocks = s.k / 32, rb = quant::row_bytes(t, s.k);
      const std::vector<uint8_t> bytes = random_rows(t, s.n, s.k, rng);
      const Tensor w = quant::quantized_weight(t, bytes, s.n, s.k);
      const ExactActivations a = exact_activations(s.m, s.k, rng);
      const std::vector<int>& xq = a.xq;
      const std::vector<float>& dx = a.dx;
      const Tensor& x = a.x;
      const Tensor y = product(t, x, w, s.n);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          const uint8_t* row = bytes.data() + j * rb;
          float acc = 0.0f;
          for (int64_t g = 0; g < blocks; ++g) {
            const uint8_t* blk = row + (g / 8) * quant::row_bytes(t, 256);
            const float d = dx[size_t(i * blocks + g)];
            if (t == QuantType::Q6_K) {
              for (int e = 0; e < 2; ++e) {
                int32_t sum = 0;
                for (int64_t c = 32 * g + 16 * e; c < 32 * g + 16 * e + 16; ++c)
                  sum += code(t, row, c) * xq[size_t(i * s.k + c)];
                const float sc = get_half(blk + 208) * float(int8_t(blk[192 + 2 * (g % 8) + e]));
                acc = std::fma(float(sum), sc * d, acc);
              }
              continue;
            }
            const float sc = get_half(blk) * float(quant::q4k_scale(blk + 4, int(g % 8)));
            const float off = get_half(blk + 2) * float(quant::q4k_min(blk + 4, int(g % 8)));
            int32_t sum = 0, xsum = 0;
            for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
              sum += code(t, row, c) * xq[size_t(i * s.k + c)];
              xsum += xq[size_t(i * s.k + c)];
            }
            acc = std::fma(float(sum), sc * d, acc);
            acc = std::fma(-off, d * float(xsum), acc);
          }
          const float got = y.data<float>()[i * s.n + j];
          ASSERT_EQ(std::memcmp(&got, &acc, 4), 0)
              << where(t, s.m, s.n, s.k) << " row " << i << " col " << j << ": got " << got
              << " want " << acc;
        }
    }
}

// Row i of each product has the bits of row i alone (few_rows) and inside products of 2 and 3
// rows (few_rows) and of the whole (tiles).
TEST(QuantAmxK, RowsAloneEqualRowsInAPrompt) {
  SKIP_WITHOUT_AMX();
  for (QuantType t : kTypes)
    for (const Shape& s : kShapes) {
      if (s.m == 1) continue;
      std::mt19937 rng(uint32_t(s.m * 1000 + s.n + s.k + int(t)));
      const Tensor w = quant::quantized_weight(t, random_rows(t, s.n, s.k, rng), s.n, s.k);
      const Tensor x = activations(s.m, s.k, rng);
      const Tensor y = product(t, x, w, s.n);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t rows : {1, 3}) {
          const int64_t first = std::max<int64_t>(0, std::min(i, s.m - rows));
          if (first + rows > s.m) continue;
          Tensor xi = empty({rows, s.k}, DType::F32);
          std::memcpy(xi.data_ptr(), x.data<float>() + first * s.k, size_t(rows * s.k) * 4);
          const Tensor yi = product(t, xi, w, s.n);
          ASSERT_EQ(std::memcmp(yi.data<float>() + (i - first) * s.n, y.data<float>() + i * s.n,
                                size_t(s.n) * 4),
                    0)
              << where(t, s.m, s.n, s.k) << " row " << i << " in " << rows;
        }
    }
}

// Every code 0 or the largest (15, 31, 63) with every scale and min 63 (Q6_K: scales 127 or
// -128) against activations that
// round to +-127 exactly (dx = 2^-7): every partial sum is a short dyadic number, so the products
// equal the fp64 ones exactly, in the tiles and in few_rows.
TEST(QuantAmxK, ExtremeCodesScalesAndMinsAreExact) {
  SKIP_WITHOUT_AMX();
  constexpr int64_t k = 512, n = 21;
  for (QuantType t : kTypes)
    for (int64_t m : {int64_t(19), int64_t(1)}) {
      const int64_t bb = quant::row_bytes(t, 256);
      std::vector<uint8_t> bytes(size_t(n * quant::row_bytes(t, k)));
      for (int64_t j = 0; j < n; ++j)
        for (int64_t b = 0; b < k / 256; ++b) {
          uint8_t* p = bytes.data() + (j * (k / 256) + b) * bb;
          const bool top = j % 2 == 0;  // the largest code, or 0
          if (t == QuantType::Q6_K) {
            std::memset(p, top ? 0xFF : 0, 192);  // ql and qh
            std::memset(p + 192, j % 4 < 2 ? 127 : 0x80, 16);
            put_half(p + 208, j % 3 ? 1.0f / 64 : -1.0f / 64);
            continue;
          }
          put_half(p, j % 3 ? 1.0f / 64 : -1.0f / 64);
          put_half(p + 2, j % 5 ? 1.0f / 64 : -1.0f / 64);
          std::memset(p + 4, 0xFF, 12);  // every scale and min 63
          if (t == QuantType::Q5_K) std::memset(p + 16, top ? 0xFF : 0, 32);
          std::memset(p + (t == QuantType::Q5_K ? 48 : 16), top ? 0xFF : 0, 128);
        }
      const Tensor w = quant::quantized_weight(t, bytes, n, k);
      Tensor x = empty({m, k}, DType::F32);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t c = 0; c < k; ++c)
          x.data<float>()[i * k + c] = (i % 3 == 2 && c % 2 ? -1.0f
                                        : i % 2             ? -1.0f
                                                            : 1.0f) *
                                       (127.0f / 128.0f);
      const Tensor y = product(t, x, w, n);
      std::vector<double> wd(static_cast<size_t>(k));
      for (int64_t j = 0; j < n; ++j) {
        quant::dequantize_row(t, bytes.data() + j * quant::row_bytes(t, k), wd.data(), k);
        for (int64_t i = 0; i < m; ++i) {
          double want = 0;
          for (int64_t c = 0; c < k; ++c)
            want += double(x.data<float>()[i * k + c]) * wd[size_t(c)];
          ASSERT_EQ(double(y.data<float>()[i * n + j]), want)
              << where(t, m, n, k) << " row " << i << " col " << j;
        }
      }
    }
}

// Switched off (allow_quant_amx(false), as TESSEL_QUANT_AMX=off does), the k-quants take the VNNI
// kernels again: the avx512 set's product equals the avx2 set's bit for bit, as before, for a
// prompt (tiles) and a decode step (rows).
TEST(QuantAmxK, SwitchedOffGivesTheVnniKernelsBits) {
  SKIP_WITHOUT_AMX();
  for (QuantType t : kTypes)
    for (int64_t m : {int64_t(33), int64_t(1)}) {
      std::mt19937 rng(uint32_t(3 + m));
      constexpr int64_t n = 13, k = 768;
      const Tensor w = quant::quantized_weight(t, random_rows(t, n, k, rng), n, k);
      const Tensor x = activations(m, k, rng);
      const Tensor with_amx = product(t, x, w, n);
      const AmxLimit off(false);
      EXPECT_FALSE(quant_amx_enabled());
      const Tensor without = product(t, x, w, n);
      Tensor avx2 = zeros({m, n}, DType::F32);
      cpu_backend_for(KernelSet::Avx2).quant_matmul(t, x, w, avx2);
      EXPECT_EQ(std::memcmp(without.data_ptr(), avx2.data_ptr(), size_t(m * n) * 4), 0)
          << where(t, m, n, k);
      // The AMX order is another one (not a test of quality: both are within the bound above).
      EXPECT_NE(std::memcmp(with_amx.data_ptr(), avx2.data_ptr(), size_t(m * n) * 4), 0)
          << where(t, m, n, k);
    }
}

// Outside batch-invariant mode a decode step (m < 4) keeps the VNNI rows, which are faster than
// few_rows (BENCHMARKS.md, "What the AMX tiles cost decode"): their bits are the switched-off
// product's, and a prompt's rows still come from the tiles (the invariant mode's bits).
TEST(QuantAmxK, OutsideTheInvariantModeDecodeKeepsTheVnniRows) {
  SKIP_WITHOUT_AMX();
  for (QuantType t : kTypes) {
    std::mt19937 rng(13);
    constexpr int64_t n = 13, k = 768;
    const Tensor w = quant::quantized_weight(t, random_rows(t, n, k, rng), n, k);
    for (int64_t m : {int64_t(1), int64_t(3), int64_t(4), int64_t(17)}) {
      const Tensor x = activations(m, k, rng);
      const Tensor fast = product(t, x, w, n, false), tiles = product(t, x, w, n, true);
      Tensor vnni;
      {
        const AmxLimit off(false);
        vnni = product(t, x, w, n, false);
      }
      const size_t bytes = size_t(m * n) * 4;
      EXPECT_EQ(std::memcmp(fast.data_ptr(), (m < 4 ? vnni : tiles).data_ptr(), bytes), 0)
          << where(t, m, n, k);
      EXPECT_NE(std::memcmp(tiles.data_ptr(), vnni.data_ptr(), bytes), 0) << where(t, m, n, k);
    }
  }
}

}  // namespace
}  // namespace tessel::kernels
