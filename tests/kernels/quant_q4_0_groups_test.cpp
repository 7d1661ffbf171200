// SPDX-License-Identifier: Apache-2.0
// Q4_0 regrouped four rows at a time (kernels/quant/q4_0_groups.h, QuantType::Q4_0x4): the
// layout as documented (byte positions of a block's scales and codes; rows past the last whole
// group left plain), regrouping and back giving the bytes again, a row gathered from its group
// equal to the plain row; every kernel set, dot product, vector width and the AMX switch giving
// a regrouped matrix's products the same bits as the plain matrix's at odd sizes (m = 1, the
// decode rows, and prompts on the tiles; n with a partial last group); the fp64 reference, the
// dequantizer and the embedding lookup agreeing with Q4_0's; the row-wise entry points refusing
// the layout; and quant_layout asking for it exactly where the 512-bit decode rows and the avx2
// set's group rows run.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error_text.h"
#include "kernels/quant_dot_limits.h"
#include "kernels/quant_test_util.h"
#include "tessel/core/cpu_features.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/q4_0_groups.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/kernels/quant/quantize.h"
#include "tessel/kernels/quant_amx.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;
using testing_limits::AmxLimit;
using testing_limits::BitsLimit;
using testing_limits::DotLimit;
using testing_quant::activations;
using testing_quant::backend_product;
using testing_quant::random_q4_0;
using testing_quant::same_bits;

std::vector<uint8_t> regrouped(const std::vector<uint8_t>& plain, int64_t n, int64_t k) {
  std::vector<uint8_t> out(plain.size());
  quant::regroup_q4_0(plain.data(), n, k, out.data());
  return out;
}

TEST(Q4_0Groups, TheLayoutIsFourScalesThenFourRowsOfCodesPerBlock) {
  std::mt19937 rng(1);
  constexpr int64_t n = 6, k = 96, rb = 54;  // one group and two plain rows; three blocks a row
  const std::vector<uint8_t> plain = random_q4_0(n, k, rng);
  const std::vector<uint8_t> g = regrouped(plain, n, k);
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t b = 0; b < 3; ++b) {
      const uint8_t* block = plain.data() + j * rb + 18 * b;
      EXPECT_EQ(std::memcmp(g.data() + 72 * b + 2 * j, block, 2), 0) << j << " " << b;
      EXPECT_EQ(std::memcmp(g.data() + 72 * b + 8 + 16 * j, block + 2, 16), 0) << j << " " << b;
    }
  // Rows 4 and 5 stay where Q4_0 puts them.
  EXPECT_EQ(std::memcmp(g.data() + 4 * rb, plain.data() + 4 * rb, size_t(2 * rb)), 0);
}

TEST(Q4_0Groups, BackAgainAndRowByRow) {
  for (int64_t n : {1, 3, 4, 7, 13, 33})
    for (int64_t k : {32, 96, 224}) {
      std::mt19937 rng(uint32_t(n * 100 + k));
      const std::vector<uint8_t> plain = random_q4_0(n, k, rng);
      const std::vector<uint8_t> g = regrouped(plain, n, k);
      std::vector<uint8_t> back(plain.size());
      quant::ungroup_q4_0(g.data(), n, k, back.data());
      EXPECT_EQ(back, plain) << n << " x " << k;
      const int64_t rb = quant::row_bytes(QuantType::Q4_0, k);
      std::vector<uint8_t> row(static_cast<size_t>(rb));
      for (int64_t r = 0; r < n; ++r) {
        quant::q4_0_group_row(g.data(), n, k, r, row.data());
        ASSERT_EQ(std::memcmp(row.data(), plain.data() + r * rb, size_t(rb)), 0) << n << " " << r;
      }
    }
  std::vector<uint8_t> row(18);
  const std::vector<uint8_t> one(18 * 4, 0);
  test::expect_error([&] { quant::q4_0_group_row(one.data(), 4, 32, 4, row.data()); },
                     {"row 4 outside [0, 4)"});
  test::expect_error([&] { quant::regroup_q4_0(one.data(), 2, 48, row.data()); },
                     {"48", "block size 32"});
}

struct Size {
  int64_t m, n, k;
};
// m = 1: the decode rows (whole groups and a last partial one); m > 1: the tiles, whole and
// partial tiles of activation rows (1-3 rows left over), two chunks of activation rows (133 rows
// at k = 4096: 128 a chunk); k = 4096 more blocks than a prefetch distance.
constexpr Size kSizes[] = {{1, 13, 96},   {1, 4, 32},   {1, 33, 768},   {1, 35, 4096}, {2, 7, 224},
                           {3, 17, 1024}, {7, 5, 224},  {33, 17, 1024}, {1, 1, 64},    {5, 3, 32},
                           {97, 15, 288}, {1, 64, 256}, {133, 7, 4096}};

// Every kernel this CPU can run, as the backend picks them for m: the layouts give equal bits.
void expect_same_bits_as_q4_0(const char* what) {
  for (KernelSet set : runnable_kernel_sets()) {
    Backend& backend = cpu_backend_for(set);
    for (const Size& s : kSizes) {
      std::mt19937 rng(uint32_t(s.m * 7919 + s.n * 31 + s.k));
      const std::vector<uint8_t> plain = random_q4_0(s.n, s.k, rng);
      const Tensor x = activations(s.m, s.k, rng);
      const Tensor want = backend_product(backend, QuantType::Q4_0, x, plain, s.n);
      const Tensor got =
          backend_product(backend, QuantType::Q4_0x4, x, regrouped(plain, s.n, s.k), s.n);
      ASSERT_TRUE(same_bits(got, want))
          << what << " " << kernel_set_name(set) << " m" << s.m << " n" << s.n << " k" << s.k;
    }
  }
}

TEST(Q4_0Groups, EveryKernelGivesTheBitsOfTheRowsInPlace) {
  testing_limits::for_each_kernel_choice(expect_same_bits_as_q4_0);
}

TEST(Q4_0Groups, ReferenceDequantizerAndLookupAgreeWithQ4_0) {
  constexpr int64_t m = 3, n = 13, k = 96;
  std::mt19937 rng(5);
  const std::vector<uint8_t> plain = random_q4_0(n, k, rng);
  const std::vector<uint8_t> g = regrouped(plain, n, k);
  // The fp64 reference.
  const Tensor x = activations(m, k, rng).to(DType::F64);
  Backend& reference = reference_backend();
  EXPECT_TRUE(same_bits(backend_product(reference, QuantType::Q4_0x4, x, g, n),
                        backend_product(reference, QuantType::Q4_0, x, plain, n)));
  // The whole matrix widened, also as a stack of two.
  EXPECT_TRUE(same_bits(quant::dequantize(QuantType::Q4_0x4, g, Shape({n, k})),
                        quant::dequantize(QuantType::Q4_0, plain, Shape({n, k}))));
  std::vector<uint8_t> stack2 = g, plain2 = plain;
  stack2.insert(stack2.end(), g.begin(), g.end());
  plain2.insert(plain2.end(), plain.begin(), plain.end());
  EXPECT_TRUE(same_bits(quant::dequantize(QuantType::Q4_0x4, stack2, Shape({2, n, k})),
                        quant::dequantize(QuantType::Q4_0, plain2, Shape({2, n, k}))));
  // A row on its own has no q4_0x4 form.
  std::vector<float> row(static_cast<size_t>(k));
  test::expect_error([&] { quant::dequantize_row(QuantType::Q4_0x4, g.data(), row.data(), k); },
                     {"q4_0_group_row"});
  std::vector<uint8_t> out(54);
  test::expect_error([&] { quant::quantize_row(QuantType::Q4_0x4, row.data(), out.data(), k); },
                     {"regroup"});
  EXPECT_EQ(quant::quant_type_name(QuantType::Q4_0x4), "q4_0x4");
  EXPECT_EQ(quant::row_bytes(QuantType::Q4_0x4, k), quant::row_bytes(QuantType::Q4_0, k));
}

// The layout is asked for exactly where the regrouped kernels read it: the avx512 set's 512-bit
// VNNI decode rows (AVX-512 VNNI, its vectors at 512 bits, no AMX tiles) and the avx2 set's group
// rows, TESSEL_QUANT_LAYOUT not "file"; every other type unchanged.
TEST(Q4_0Groups, QuantLayoutAsksForItWhereTheDecodeRowsReadIt) {
  const AmxLimit off(false);
  for (KernelSet set : runnable_kernel_sets()) {
    Backend& backend = cpu_backend_for(set);
    const bool avx2 = quant_backend_layouts() && set == KernelSet::Avx2;
    const bool rows512 =
        quant_backend_layouts() && set == KernelSet::Avx512 && cpu_features().avx512_vnni;
    EXPECT_EQ(backend.quant_layout(QuantType::Q4_0),
              rows512 || avx2 ? QuantType::Q4_0x4 : QuantType::Q4_0)
        << kernel_set_name(set);
    for (QuantType t : {QuantType::F16, QuantType::BF16})
      EXPECT_EQ(backend.quant_layout(t), t);  // Q8_0, the k-quants: quant_row_interleave_test.cpp
    EXPECT_EQ(backend.quant_layout(QuantType::Int8), QuantType::Int8);
    // The avx512 set's tiles read the plain rows; the avx2 set's group rows take any dot.
    {
      const BitsLimit bits(256);
      EXPECT_EQ(backend.quant_layout(QuantType::Q4_0), avx2 ? QuantType::Q4_0x4 : QuantType::Q4_0)
          << kernel_set_name(set);
    }
    {
      const DotLimit dot(QuantDot::Avx2);
      EXPECT_EQ(backend.quant_layout(QuantType::Q4_0), avx2 ? QuantType::Q4_0x4 : QuantType::Q4_0)
          << kernel_set_name(set);
    }
  }
  EXPECT_EQ(reference_backend().quant_layout(QuantType::Q4_0), QuantType::Q4_0);
  if (quant_amx_usable()) {
    const AmxLimit on(true);
    EXPECT_EQ(cpu_backend_for(KernelSet::Avx512).quant_layout(QuantType::Q4_0), QuantType::Q4_0);
  }
}

}  // namespace
}  // namespace tessel::kernels
