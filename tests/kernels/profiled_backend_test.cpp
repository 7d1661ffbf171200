// SPDX-License-Identifier: Apache-2.0
// The profiling decorator: while core/profile.h is on, cpu_backend() times each kernel under its
// name (GEMMs by transposes and shape, with their FLOPs) and still computes the same result.
#include <gtest/gtest.h>

#include "tessel/core/profile.h"
#include "tessel/kernels/backend.h"

namespace tessel::kernels {
namespace {

TEST(ProfiledBackend, TimesKernelsByNameAndKeepsResults) {
  Generator g(3);
  Tensor a = randn({7, 33}, DType::F32, &g), b = randn({13, 33}, DType::F32, &g);
  Tensor plain = empty({7, 13}), timed = empty({7, 13});
  GemmDesc d = dense_gemm_desc(1, 7, 13, 33, false, true);
  cpu_backend().gemm(d, a, b, plain);

  profile::reset();
  profile::set_enabled(true);
  Backend& be = cpu_backend();
  be.gemm(d, a, b, timed);
  Tensor y = empty({7, 33});
  be.unary(UnaryOp::Gelu, a, y, 0.0);
  profile::set_enabled(false);

  std::vector<profile::Entry> all = profile::snapshot();
  profile::reset();
  ASSERT_EQ(all.size(), 2u);
  const profile::Entry* gemm = nullptr;
  const profile::Entry* gelu = nullptr;
  for (const auto& e : all) {
    if (e.name == "gemm.NT 7x13x33") gemm = &e;
    if (e.name == "unary.gelu") gelu = &e;
  }
  ASSERT_NE(gemm, nullptr) << all[0].name << ", " << all[1].name;
  ASSERT_NE(gelu, nullptr);
  EXPECT_EQ(gemm->calls, 1);
  EXPECT_DOUBLE_EQ(gemm->flops, 2.0 * 7 * 13 * 33);
  EXPECT_EQ(plain.to_vector<float>(), timed.to_vector<float>());
  // Off again: the plain backend, nothing recorded.
  cpu_backend().gemm(d, a, b, timed);
  EXPECT_TRUE(profile::snapshot().empty());
}

}  // namespace
}  // namespace tessel::kernels
