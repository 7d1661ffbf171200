// SPDX-License-Identifier: Apache-2.0
// The byte dot products of the quantized matmul (kernel_set.h's QuantDot): vpmaddubsw +
// vpmaddwd (AVX2), AVX-VNNI's VEX vpdpbusd and AVX-512 VNNI's vpdpbusd must give the same int32
// sums, so that a product's bits do not depend on which of them the CPU has. What is proved
// here, on the inputs the kernels give them: every lane equals the exact sum of its four
// products, for u (unsigned) <= 63 (the fused formats' codes) or <= 128 (|w| of Q8_0 / Int8
// codes) against |x| <= 127 (the activation codes), extremes included. That is the domain where
// vpmaddubsw's int16 pair sums cannot saturate (2 * 128 * 127 < 2^15); outside it (u = 255) the
// AVX2 sums do saturate, which the last check shows, so equality is a property of the domain,
// not of the instructions. Then whole products (Q4_0, Q4_K, Q5_K, Q6_K, Q8_0, Int8) are
// bitwise equal under each dot product this CPU has, in every set that uses them.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/quant_dot_limits.h"
#include "tessel/core/cpu_features.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/kernels/quant/quantize.h"

namespace tessel::kernels {
namespace {

using quant::QuantType;

using testing_limits::AmxLimit;
using testing_limits::DotLimit;
using testing_limits::dots_here;

std::vector<int32_t> exact_lanes(const std::vector<uint8_t>& u, const std::vector<int8_t>& x) {
  std::vector<int32_t> out(u.size() / 4);
  for (size_t l = 0; l < out.size(); ++l)
    for (size_t i = 0; i < 4; ++i) out[l] += int32_t(u[4 * l + i]) * x[4 * l + i];
  return out;
}

// Blocks of u in [0, umax] and x in [-127, 127]: random ones, then the extremes (every u at
// umax against x = 127 and -127, alternating signs, zeros).
void inputs(int umax, std::mt19937& rng, std::vector<uint8_t>& u, std::vector<int8_t>& x) {
  const int random_blocks = 40;
  std::uniform_int_distribution<int> ud(0, umax), xd(-127, 127);
  for (int i = 0; i < 32 * random_blocks; ++i) {
    u.push_back(uint8_t(ud(rng)));
    x.push_back(int8_t(xd(rng)));
  }
  for (int pattern = 0; pattern < 4; ++pattern)
    for (int i = 0; i < 32; ++i) {
      u.push_back(pattern == 3 ? 0 : uint8_t(umax));
      x.push_back(int8_t(pattern == 0 ? 127 : pattern == 1 ? -127 : (i % 2 ? 127 : -127)));
    }
}

TEST(QuantDot, EveryDotProductGivesTheExactSums) {
  std::mt19937 rng(19);
  int compared = 0;
  for (int umax : {63, 128}) {
    std::vector<uint8_t> u;
    std::vector<int8_t> x;
    inputs(umax, rng, u, x);
    const std::vector<int32_t> want = exact_lanes(u, x);
    const int64_t blocks = int64_t(u.size() / 32);
    for (KernelSet set : runnable_kernel_sets())
      for (QuantDot d : dots_here()) {
        DotLimit limit(d);
        std::vector<int32_t> got(want.size(), -1);
        quant_dot_lanes(set, u.data(), x.data(), blocks, got.data());
        EXPECT_EQ(got, want) << kernel_set_name(set) << " " << quant_dot_name(quant_dot_for(set))
                             << " u <= " << umax;
        ++compared;
      }
  }
  EXPECT_GT(compared, 0);
  // Outside the domain: u = 255 against x = 127 makes vpmaddubsw's pair sums saturate at 32767.
  std::vector<uint8_t> u(32, 255);
  std::vector<int8_t> x(32, 127);
  const std::vector<int32_t> exact = exact_lanes(u, x);
  for (KernelSet set : runnable_kernel_sets()) {
    DotLimit limit(QuantDot::Avx2);
    if (quant_dot_for(set) != QuantDot::Avx2) continue;
    std::vector<int32_t> got(8);
    quant_dot_lanes(set, u.data(), x.data(), 1, got.data());
    EXPECT_EQ(got, std::vector<int32_t>(8, 2 * 32767)) << kernel_set_name(set);
    EXPECT_NE(got, exact);
  }
}

// The sets choose by the CPU: the highest dot product it has, within the limit.
TEST(QuantDot, SetsChooseTheHighestTheCpuHas) {
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(quant_dot_for(KernelSet::Baseline), QuantDot::Scalar);
  const QuantDot avx2_best = f.avx_vnni ? QuantDot::AvxVnni : QuantDot::Avx2;
  EXPECT_EQ(quant_dot_for(KernelSet::Avx2), avx2_best);
  EXPECT_EQ(quant_dot_for(KernelSet::Avx512), f.avx512_vnni ? QuantDot::Avx512Vnni : avx2_best);
  {
    DotLimit limit(QuantDot::AvxVnni);
    EXPECT_EQ(quant_dot_for(KernelSet::Avx512), avx2_best);
  }
  DotLimit limit(QuantDot::Avx2);
  EXPECT_EQ(quant_dot_for(KernelSet::Avx2), QuantDot::Avx2);
  EXPECT_EQ(quant_dot_for(KernelSet::Avx512), QuantDot::Avx2);
}

// Whole products under each dot product this CPU has are bitwise equal to the AVX2 path's.
TEST(QuantDot, ProductsAreBitwiseEqualUnderEveryDotProduct) {
  const AmxLimit no_amx(false);  // the VNNI / AVX2 tiles, not quant_amx.cpp
  const std::vector<QuantDot> dots = dots_here();
  if (dots.size() == 1) GTEST_SKIP() << "this CPU has no VNNI: only the AVX2 dot product runs";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int compared = 0;
  for (QuantType t : {QuantType::Q4_0, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K,
                      QuantType::Q8_0, QuantType::Int8}) {
    // Int8 rows: 3 blocks of 32 and 5 weights that no activation block covers.
    const int64_t k = t == QuantType::Int8 ? 101 : 3 * quant::block_elements(t), n = 13, m = 5;
    std::vector<float> wf(size_t(n * k)), xf(size_t(m * k));
    for (auto& v : wf) v = normal(rng);
    for (auto& v : xf) v = normal(rng);
    xf[7] = 300.0f;  // an outlier: the other codes of its block round small
    Tensor w = quant::quantized_weight(t, quant::quantize_rows(t, wf.data(), n, k), n, k);
    Tensor x = empty({m, k}, DType::F32);
    std::memcpy(x.data_ptr(), xf.data(), xf.size() * 4);
    for (KernelSet set : runnable_kernel_sets()) {
      if (set == KernelSet::Baseline) continue;
      auto product = [&](QuantDot d) {
        DotLimit limit(d);
        Tensor y = zeros({m, n}, DType::F32);
        cpu_backend_for(set).quant_matmul(t, x, w, y);
        return std::vector<float>(y.data<float>(), y.data<float>() + m * n);
      };
      const std::vector<float> ref = product(QuantDot::Avx2);
      for (QuantDot d : dots) {
        if (d == QuantDot::Avx2) continue;
        const std::vector<float> got = product(d);
        EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0)
            << kernel_set_name(set) << " " << quant::quant_type_name(t) << " " << quant_dot_name(d)
            << " differs from avx2";
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace tessel::kernels
