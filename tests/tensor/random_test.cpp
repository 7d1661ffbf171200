// SPDX-License-Identifier: Apache-2.0
// Philox4x32-10 known-answer vectors (from the Random123 distribution) and the thread-count
// independence of draws.
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/core/rng.h"
#include "tessel/core/threads.h"
#include "tessel/tensor/tensor.h"

namespace tessel {
namespace {

TEST(Philox, KnownAnswers) {
  auto zero = philox4x32(0, 0, 0);
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
  auto ones = philox4x32(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(ones[0], 0x408f276du);
  EXPECT_EQ(ones[1], 0x41c83b0eu);
  EXPECT_EQ(ones[2], 0xa20bc7c6u);
  EXPECT_EQ(ones[3], 0x6d5451fdu);
  // Counter words {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, key {0xa4093822, 0x299f31d0}.
  auto pi = philox4x32(0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull);
  EXPECT_EQ(pi[0], 0xd16cfe09u);
  EXPECT_EQ(pi[1], 0x94fdccebu);
  EXPECT_EQ(pi[2], 0x5001e420u);
  EXPECT_EQ(pi[3], 0x24126ea1u);
}

TEST(Rng, DrawsDoNotDependOnThreadCount) {
  int saved = num_threads();
  std::vector<float> results[3];
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Generator gen(42);
    Tensor a = randn({1000, 33}, DType::F32, &gen);
    Tensor b = rand({257}, DType::F32, &gen);
    auto va = a.to_vector<float>(), vb = b.to_vector<float>();
    va.insert(va.end(), vb.begin(), vb.end());
    results[threads - 1] = va;
  }
  set_num_threads(saved);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(Rng, GeneratorAdvancesAndReplays) {
  Generator gen(7);
  Tensor a = randn({13}, DType::F32, &gen);
  EXPECT_EQ(gen.offset(), 13u);
  Tensor b = randn({13}, DType::F32, &gen);
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());
  gen.set_state(7, 13);
  Tensor c = randn({13}, DType::F32, &gen);
  EXPECT_EQ(b.to_vector<float>(), c.to_vector<float>());
  Generator other(8);
  EXPECT_NE(randn({13}, DType::F32, &other).to_vector<float>(), a.to_vector<float>());
}

TEST(Rng, MomentsAreRight) {
  Generator gen(1);
  auto n = randn({200000}, DType::F64, &gen).to_vector<double>();
  auto u = rand({200000}, DType::F64, &gen).to_vector<double>();
  double mean = 0, var = 0, umean = 0, umin = 1, umax = 0;
  for (double x : n) mean += x;
  mean /= double(n.size());
  for (double x : n) var += (x - mean) * (x - mean);
  var /= double(n.size());
  for (double x : u) {
    umean += x;
    umin = std::min(umin, x);
    umax = std::max(umax, x);
  }
  umean /= double(u.size());
  // Standard errors: mean 1/sqrt(2e5) = 0.0022, variance sqrt(2/2e5) = 0.0032; 5 sigma bounds.
  EXPECT_NEAR(mean, 0.0, 0.012);
  EXPECT_NEAR(var, 1.0, 0.016);
  EXPECT_NEAR(umean, 0.5, 0.0035);
  EXPECT_GE(umin, 0.0);
  EXPECT_LT(umax, 1.0);
}

}  // namespace
}  // namespace tessel
