// SPDX-License-Identifier: Apache-2.0
// The k-quants and Q8_0 interleaved four rows at a time (kernels/quant/row_interleave.h,
// QuantType::Q4_Kx4, Q5_Kx4, Q6_Kx4, Q8_0x4): the layout as documented (whole blocks side by side
// per group; rows past the last whole group left plain), interleaving and back giving the bytes
// again; every kernel set, dot product, vector width, the AMX switch and batch-invariant mode
// giving an interleaved matrix's products the same bits as the plain matrix's at odd sizes (m =
// 1-3, the direct decode rows; 4-7, the rows; 8 and more, the tiles; n with a partial last group);
// the fp64 reference and the dequantizer agreeing with the plain type's; the row-wise entry points
// refusing the layout; and quant_layout asking for it exactly where the SIMD rows read it.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error_text.h"
#include "kernels/quant_dot_limits.h"
#include "kernels/quant_test_util.h"
#include "tessel/kernels/batch_invariant.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/kernels/quant/quantize.h"
#include "tessel/kernels/quant/row_interleave.h"
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
using testing_quant::same_bits;

constexpr QuantType kKQuants[] = {QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K,
                                  QuantType::Q8_0};

// Rows quantized from random weights whose scale changes block by block, so every super-block
// has its own scales and mins.
std::vector<uint8_t> random_rows(QuantType t, int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<float> w(size_t(n * k));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.01f, 2.0f);
  float s = 1.0f;
  for (int64_t i = 0; i < n * k; ++i) {
    if (i % 32 == 0) s = scale(rng);
    w[size_t(i)] = normal(rng) * s;
  }
  return quant::quantize_rows(t, w.data(), n, k);
}

std::vector<uint8_t> interleaved(QuantType t, const std::vector<uint8_t>& plain, int64_t n,
                                 int64_t k) {
  std::vector<uint8_t> out(plain.size());
  quant::interleave_rows(t, plain.data(), n, k, out.data());
  return out;
}

TEST(RowInterleave, TheLayoutIsFourWholeBlocksSideBySide) {
  std::mt19937 rng(1);
  constexpr int64_t n = 6, k = 768;  // one group and two plain rows; three super-blocks a row
  for (QuantType t : kKQuants) {
    const int64_t bb = quant::block_bytes(t), rb = quant::row_bytes(t, k);
    const std::vector<uint8_t> plain = random_rows(t, n, k, rng);
    const std::vector<uint8_t> g = interleaved(t, plain, n, k);
    const QuantType x4 = quant::interleaved_form(t);
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t b = 0; b < 3; ++b) {
        EXPECT_EQ(
            std::memcmp(g.data() + (4 * b + j) * bb, plain.data() + j * rb + b * bb, size_t(bb)), 0)
            << quant::quant_type_name(t) << " " << j << " " << b;
        EXPECT_EQ(quant::interleaved_block_offset(x4, n, k, j, b), (4 * b + j) * bb);
      }
    // Rows 4 and 5 stay where the plain type puts them.
    EXPECT_EQ(std::memcmp(g.data() + 4 * rb, plain.data() + 4 * rb, size_t(2 * rb)), 0);
    EXPECT_EQ(quant::interleaved_block_offset(x4, n, k, 5, 2), 5 * rb + 2 * bb);
  }
}

TEST(RowInterleave, BackAgainAndNames) {
  for (QuantType t : kKQuants)
    for (int64_t n : {1, 3, 4, 7, 13, 33})
      for (int64_t k : {256, 768}) {
        std::mt19937 rng(uint32_t(n * 100 + k));
        const std::vector<uint8_t> plain = random_rows(t, n, k, rng);
        const std::vector<uint8_t> g = interleaved(t, plain, n, k);
        std::vector<uint8_t> back(plain.size());
        quant::deinterleave_rows(quant::interleaved_form(t), g.data(), n, k, back.data());
        EXPECT_EQ(back, plain) << quant::quant_type_name(t) << " " << n << " x " << k;
      }
  EXPECT_EQ(quant::quant_type_name(QuantType::Q4_Kx4), "q4_Kx4");
  EXPECT_EQ(quant::quant_type_name(QuantType::Q5_Kx4), "q5_Kx4");
  EXPECT_EQ(quant::quant_type_name(QuantType::Q6_Kx4), "q6_Kx4");
  EXPECT_EQ(quant::quant_type_name(QuantType::Q8_0x4), "q8_0x4");
  for (QuantType t : kKQuants) {
    const QuantType x4 = quant::interleaved_form(t);
    EXPECT_TRUE(quant::is_interleaved(x4));
    EXPECT_FALSE(quant::is_interleaved(t));
    EXPECT_EQ(quant::plain_form(x4), t);
    EXPECT_EQ(quant::row_bytes(x4, 512), quant::row_bytes(t, 512));
    EXPECT_EQ(quant::block_elements(x4), quant::block_elements(t));
  }
  EXPECT_EQ(quant::plain_form(QuantType::Q4_0x4), QuantType::Q4_0x4);
  test::expect_error([] { quant::interleaved_form(QuantType::Q4_0); },
                     {"q4_0 has no interleaved form"});
  std::vector<uint8_t> bytes(144 * 4);
  test::expect_error([&] { quant::interleaved_block_offset(QuantType::Q4_Kx4, 4, 256, 4, 0); },
                     {"row 4 block 0 outside [0, 4) x [0, 1)"});
  test::expect_error(
      [&] { quant::interleave_rows(QuantType::Q4_K, bytes.data(), 2, 300, bytes.data()); },
      {"300", "block size 256"});
}

struct Size {
  int64_t m, n, k;
};
// m = 1-3: the direct decode rows (whole groups, a partial last one, four groups at a time for
// m = 2, 3; Q8_0: its rows for m < 8); m = 4-7: the rows with their scales beforehand; m >= 8:
// the tiles (partial tiles of activation rows, two chunks of activation rows at k = 4096); n from
// one row to many groups.
constexpr Size kSizes[] = {{1, 13, 256},  {1, 4, 768},  {1, 33, 768},  {1, 7, 4096},  {2, 7, 512},
                           {3, 17, 1024}, {4, 13, 256}, {5, 7, 768},   {7, 33, 512},  {8, 5, 256},
                           {13, 17, 768}, {1, 1, 256},  {33, 13, 512}, {133, 7, 4096}};

// Every kernel this CPU can run, as the backend picks them for m: the layouts give equal bits.
void expect_same_bits_as_plain(const char* what) {
  for (KernelSet set : runnable_kernel_sets()) {
    Backend& backend = cpu_backend_for(set);
    for (QuantType t : kKQuants)
      for (const Size& s : kSizes) {
        std::mt19937 rng(uint32_t(s.m * 7919 + s.n * 31 + s.k + int(t)));
        const std::vector<uint8_t> plain = random_rows(t, s.n, s.k, rng);
        const Tensor x = activations(s.m, s.k, rng);
        const Tensor want = backend_product(backend, t, x, plain, s.n);
        const Tensor got = backend_product(backend, quant::interleaved_form(t), x,
                                           interleaved(t, plain, s.n, s.k), s.n);
        ASSERT_TRUE(same_bits(got, want))
            << what << " " << kernel_set_name(set) << " " << quant::quant_type_name(t) << " m"
            << s.m << " n" << s.n << " k" << s.k;
      }
  }
}

TEST(RowInterleave, EveryKernelGivesTheBitsOfTheRowsInPlace) {
  testing_limits::for_each_kernel_choice(expect_same_bits_as_plain);
  struct Invariant {
    bool before = batch_invariant();
    Invariant() { set_batch_invariant(true); }
    ~Invariant() { set_batch_invariant(before); }
  } invariant;
  testing_limits::for_each_kernel_choice([](const char* what) {
    expect_same_bits_as_plain(("batch-invariant, " + std::string(what)).c_str());
  });
}

TEST(RowInterleave, ReferenceAndDequantizerAgreeWithThePlainType) {
  constexpr int64_t m = 3, n = 13, k = 512;
  std::mt19937 rng(5);
  for (QuantType t : kKQuants) {
    const QuantType x4 = quant::interleaved_form(t);
    const std::vector<uint8_t> plain = random_rows(t, n, k, rng);
    const std::vector<uint8_t> g = interleaved(t, plain, n, k);
    const Tensor x = activations(m, k, rng).to(DType::F64);
    Backend& reference = reference_backend();
    EXPECT_TRUE(same_bits(backend_product(reference, x4, x, g, n),
                          backend_product(reference, t, x, plain, n)));
    // The whole matrix widened, also as a stack of two.
    EXPECT_TRUE(same_bits(quant::dequantize(x4, g, Shape({n, k})),
                          quant::dequantize(t, plain, Shape({n, k}))));
    std::vector<uint8_t> stack2 = g, plain2 = plain;
    stack2.insert(stack2.end(), g.begin(), g.end());
    plain2.insert(plain2.end(), plain.begin(), plain.end());
    EXPECT_TRUE(same_bits(quant::dequantize(x4, stack2, Shape({2, n, k})),
                          quant::dequantize(t, plain2, Shape({2, n, k}))));
    // A row on its own has no interleaved form.
    std::vector<float> row(static_cast<size_t>(k));
    test::expect_error([&] { quant::dequantize_row(x4, g.data(), row.data(), k); },
                       {"dequantize_matrix_row"});
    std::vector<uint8_t> out(size_t(quant::row_bytes(t, k)));
    test::expect_error([&] { quant::quantize_row(x4, row.data(), out.data(), k); },
                       {"interleave them"});
    test::expect_error([&] { quant::dequantize(x4, plain, Shape({n * k})); },
                       {"needs a matrix shape"});
  }
}

// The layout is asked for exactly where the interleaved rows are read in place: the SIMD sets
// without AMX tiles, TESSEL_QUANT_LAYOUT not "file"; the other types keep their own answers.
TEST(RowInterleave, QuantLayoutAsksForItWhereTheRowsReadIt) {
  const AmxLimit off(false);
  for (KernelSet set : runnable_kernel_sets()) {
    Backend& backend = cpu_backend_for(set);
    const bool simd = quant_backend_layouts() && set != KernelSet::Baseline;
    for (QuantType t : kKQuants) {
      EXPECT_EQ(backend.quant_layout(t), simd ? quant::interleaved_form(t) : t)
          << kernel_set_name(set);
      const BitsLimit bits(256);
      const DotLimit dot(QuantDot::Avx2);
      EXPECT_EQ(backend.quant_layout(t), simd ? quant::interleaved_form(t) : t)
          << kernel_set_name(set);
    }
    for (QuantType t : {QuantType::F16, QuantType::BF16, QuantType::Int8})
      EXPECT_EQ(backend.quant_layout(t), t);
  }
  EXPECT_EQ(reference_backend().quant_layout(QuantType::Q4_K), QuantType::Q4_K);
  if (quant_amx_usable()) {
    const AmxLimit on(true);
    EXPECT_EQ(cpu_backend_for(KernelSet::Avx512).quant_layout(QuantType::Q6_K), QuantType::Q6_K);
  }
}

}  // namespace
}  // namespace tessel::kernels
