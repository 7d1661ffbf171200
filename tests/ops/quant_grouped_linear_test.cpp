// SPDX-License-Identifier: Apache-2.0
// ops::quant_grouped_linear, the experts' product on stacked GGUF blocks: against an fp64 product
// with the dequantized weights (every type, odd group sizes, an empty group, a group longer than
// one quant_matmul chunk), bitwise equal to quant_linear on each group's own matrix, the blocks of
// a group without rows never read (poisoned with NaN scales), and bad operands refused.
#include "tessel/ops/quant_grouped_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/error_text.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quantize.h"
#include "tessel/ops/quant_linear.h"

namespace tessel::ops {
namespace {

using kernels::quant::QuantType;

struct Stack {
  Tensor blocks;                // i8 [groups, out, row bytes]
  std::vector<double> weights;  // the dequantized values, [groups, out, in]
};

Stack random_stack(QuantType type, int64_t groups, int64_t out, int64_t in, uint32_t seed) {
  std::vector<float> w(size_t(groups * out * in));
  uint32_t s = seed;
  for (float& v : w) {
    s = s * 1664525u + 1013904223u;
    v = (float(s >> 8) / float(1 << 24) - 0.5f) * 0.4f;
  }
  const std::vector<uint8_t> bytes =
      kernels::quant::quantize_rows(type, w.data(), groups * out, in);
  Stack st;
  st.blocks = empty({groups, out, kernels::quant::row_bytes(type, in)}, DType::I8);
  std::memcpy(st.blocks.data_ptr(), bytes.data(), bytes.size());
  const Tensor back = kernels::quant::dequantize(type, bytes, Shape({groups, out, in}));
  for (int64_t i = 0; i < back.numel(); ++i) st.weights.push_back(back.data<float>()[i]);
  return st;
}

Tensor random_x(int64_t rows, int64_t in) {
  std::vector<float> x(size_t(rows * in));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i) + 0.1f);
  return from_data(x, Shape{rows, in});
}

TEST(QuantGroupedLinear, MatchesFp64AndQuantLinearPerGroup) {
  autograd::NoGradGuard no_grad;
  // Group 1 empty, group 3 longer than one quant_matmul chunk (64 rows).
  const std::vector<int64_t> offsets = {0, 7, 7, 20, 91, 92};
  const int64_t groups = 5, rows = 92, out = 13;
  for (QuantType type : {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_K, QuantType::Q5_K,
                         QuantType::Q6_K, QuantType::F16, QuantType::BF16}) {
    const int64_t in = kernels::quant::block_elements(type) == 256 ? 256 : 96;
    const Stack st = random_stack(type, groups, out, in, 11u + uint32_t(type));
    const Tensor x = random_x(rows, in);
    const Tensor off = from_data(offsets, Shape{groups + 1});
    const Tensor y = quant_grouped_linear(x, type, st.blocks, in, off);
    ASSERT_EQ(y.shape(), Shape({rows, out}));
    double diff = 0, norm = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t a = offsets[size_t(g)], n = offsets[size_t(g + 1)] - a;
      if (n == 0) continue;
      // The same rows through quant_linear with the group's own matrix: the same bits.
      const Tensor own = st.blocks.narrow(0, g, 1).reshape({out, st.blocks.size(2)}).clone();
      const Tensor want = quant_linear(x.narrow(0, a, n).clone(), type, own, in);
      EXPECT_EQ(std::memcmp(want.data_ptr(), y.narrow(0, a, n).data_ptr(), want.nbytes()), 0)
          << kernels::quant::quant_type_name(type) << " group " << g;
      for (int64_t r = a; r < a + n; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          double ref = 0;
          for (int64_t k = 0; k < in; ++k)
            ref += double(x.data<float>()[r * in + k]) * st.weights[size_t((g * out + o) * in + k)];
          const double d = double(y.data<float>()[r * out + o]) - ref;
          diff += d * d;
          norm += ref * ref;
        }
      }
    }
    // The kernels round the activations to 8 bits per block for the integer types (NMSE ~1e-5);
    // F16 / BF16 weights multiply f32 activations (~1e-12). A wrong group's weight is ~1.
    const double nmse = diff / norm;
    EXPECT_LT(nmse, 1e-3) << kernels::quant::quant_type_name(type);
  }
}

TEST(QuantGroupedLinear, GroupsWithoutRowsAreNotRead) {
  autograd::NoGradGuard no_grad;
  const QuantType type = QuantType::Q8_0;
  const int64_t in = 64, out = 7;
  Stack st = random_stack(type, 3, out, in, 5u);
  const Tensor x = random_x(5, in);
  const Tensor off = from_data(std::vector<int64_t>{0, 2, 2, 5}, Shape{4});
  const Tensor clean = quant_grouped_linear(x, type, st.blocks, in, off);
  // Expert 1 gets no row: its bytes become NaN scales (0xFF..), which any read would spread.
  const int64_t bytes = st.blocks.size(1) * st.blocks.size(2);
  std::memset(static_cast<uint8_t*>(st.blocks.data_ptr()) + bytes, 0xFF, size_t(bytes));
  const Tensor poisoned = quant_grouped_linear(x, type, st.blocks, in, off);
  EXPECT_EQ(std::memcmp(clean.data_ptr(), poisoned.data_ptr(), clean.nbytes()), 0);
  for (int64_t i = 0; i < poisoned.numel(); ++i)
    ASSERT_TRUE(std::isfinite(poisoned.data<float>()[i]));
}

TEST(QuantGroupedLinear, BadOperandsAreRefused) {
  const QuantType type = QuantType::Q8_0;
  const Stack st = random_stack(type, 3, 5, 64, 3u);
  const Tensor x = random_x(4, 64);
  const Tensor ok = from_data(std::vector<int64_t>{0, 1, 3, 4}, Shape{4});
  test::expect_error(
      [&] {
        quant_grouped_linear(x, type, st.blocks, 64,
                             from_data(std::vector<int64_t>{0, 3, 1, 4}, Shape{4}));
      },
      {"offsets decrease at group 1", "3 > 1"});
  test::expect_error(
      [&] {
        quant_grouped_linear(x, type, st.blocks, 64,
                             from_data(std::vector<int64_t>{0, 1, 3}, Shape{3}));
      },
      {"offsets must be i64 [4]"});
  test::expect_error(
      [&] {
        quant_grouped_linear(x, type, st.blocks, 64,
                             from_data(std::vector<int64_t>{0, 1, 2, 3}, Shape{4}));
      },
      {"from 0 to the 4 rows"});
  test::expect_error([&] { quant_grouped_linear(random_x(4, 96), type, st.blocks, 96, ok); },
                     {"i8 [groups, out, 102]", "96 weights a row"});
  test::expect_error([&] { quant_grouped_linear(x, QuantType::Q4_K, st.blocks, 64, ok); },
                     {"q4_K"});
  Tensor xg = random_x(4, 64);
  xg.set_requires_grad(true);
  test::expect_error([&] { quant_grouped_linear(xg, type, st.blocks, 64, ok); },
                     {"needs a gradient", "inference-only"});
}

}  // namespace
}  // namespace tessel::ops
