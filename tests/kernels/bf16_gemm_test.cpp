// SPDX-License-Identifier: Apache-2.0
// bf16 GEMM where the CPU has bf16 arithmetic: oneDNN's bf16 matmul (f32 accumulation) is chosen
// on CPUs with AVX-512-BF16 or AMX, and the widening path (bf16 -> f32 -> f32 GEMM -> bf16) stays
// the fallback. Both paths against the fp64 product of the same bf16 inputs, on odd shapes with
// transposes, alpha, beta, batches and a broadcast operand; the choice follows the probed CPU.
#include <gtest/gtest.h>

#include <string>

#include "common/error_text.h"
#include "op_harness.h"
#include "tessel/core/cpu_features.h"
#include "tessel/kernels/cpu/gemm_onednn.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::testing {
namespace {

using kernels::GemmDesc;
namespace onednn = kernels::onednn;

// Restores the automatic choice when a test ends.
struct ModeGuard {
  ~ModeGuard() { onednn::set_bf16_gemm(onednn::Bf16Gemm::Auto); }
};

struct Shape3 {
  int64_t batch, m, n, k;
  bool ta, tb, b_batched;
  double alpha, beta;
};

// One product in bf16 on the CPU backend (in the current mode), and its fp64 reference on the
// same rounded values; returns the NMSE of the bf16 result.
double product_nmse(const Shape3& s, uint64_t seed) {
  GemmDesc d = kernels::dense_gemm_desc(s.batch, s.m, s.n, s.k, s.ta, s.tb, s.b_batched);
  d.alpha = s.alpha;
  d.beta = s.beta;
  Generator g(seed);
  const Shape a_shape = s.ta ? Shape{s.batch, s.k, s.m} : Shape{s.batch, s.m, s.k};
  Shape b_shape = s.tb ? Shape{s.batch, s.n, s.k} : Shape{s.batch, s.k, s.n};
  if (!s.b_batched) b_shape = s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n};
  const Tensor a = randn(a_shape, DType::F32, &g).to(DType::BF16);
  const Tensor b = randn(b_shape, DType::F32, &g).to(DType::BF16);
  const Tensor c0 = randn({s.batch, s.m, s.n}, DType::F32, &g).to(DType::BF16);
  Tensor c = c0.clone();
  kernels::cpu_backend().gemm(d, a, b, c);
  Tensor want = c0.to(DType::F64);
  kernels::reference_backend().gemm(d, a.to(DType::F64), b.to(DType::F64), want);
  return nmse(c.to(DType::F64), want);
}

const Shape3 kShapes[] = {
    {1, 7, 13, 33, false, false, true, 1.0, 0.0}, {1, 33, 7, 13, true, false, true, 0.5, 0.0},
    {1, 13, 33, 7, false, true, true, 1.0, 1.0},  {1, 1, 33, 65, false, true, true, 1.0, 0.0},
    {3, 7, 13, 33, false, false, true, 1.0, 0.0}, {3, 13, 7, 33, true, true, true, 2.0, 0.5},
    {5, 7, 13, 33, false, true, false, 1.0, 1.0}, {1, 129, 257, 96, false, true, true, 1.0, 0.0},
};

// bf16 keeps 8 significant bits: the result's own rounding gives an NMSE near 1e-5; the harness's
// bound for bf16 products is 1e-4.
constexpr double kBf16Nmse = 1e-4;

TEST(Bf16Gemm, NativeWhereTheCpuHasBf16Arithmetic) {
  const CpuFeatures& f = cpu_features();
  const onednn::Bf16Support& s = onednn::bf16_support();
  std::printf("bf16 gemm: %s (%s); cpu avx512_bf16 %d amx_bf16 %d\n",
              s.native ? "native" : "widened to f32", s.implementation.c_str(), f.avx512_bf16,
              f.amx_bf16);
  if (f.avx512_bf16 || f.amx_bf16) {
    EXPECT_TRUE(s.native) << s.implementation;
  }
  if (!f.avx512f) {  // oneDNN 2.6: none without AVX-512
    EXPECT_FALSE(s.native) << s.implementation;
  }
  ModeGuard guard;
  onednn::set_bf16_gemm(onednn::Bf16Gemm::Native);
  if (s.native) {
    EXPECT_TRUE(onednn::bf16_gemm_native());
  } else {
    test::expect_error([] { onednn::bf16_gemm_native(); }, {"native bf16", "TESSEL_BF16_GEMM"});
  }
  onednn::set_bf16_gemm(onednn::Bf16Gemm::Widen);
  EXPECT_FALSE(onednn::bf16_gemm_native());
  // Auto: every product on AMX tiles, only products of few rows on AVX-512-BF16's vectors.
  onednn::set_bf16_gemm(onednn::Bf16Gemm::Auto);
  const int64_t few = onednn::kBf16VectorNativeMaxRows - 1;
  const int64_t many = onednn::kBf16VectorNativeMaxRows;
  EXPECT_EQ(onednn::bf16_gemm_native(few), s.native);
  EXPECT_EQ(onednn::bf16_gemm_native(many), s.native && s.tiles);
  if (!f.amx_bf16) {
    EXPECT_FALSE(s.tiles) << s.implementation;
  }
}

TEST(Bf16Gemm, BothPathsMatchTheFp64Product) {
  ModeGuard guard;
  std::vector<onednn::Bf16Gemm> modes = {onednn::Bf16Gemm::Widen};
  if (onednn::bf16_support().native) modes.push_back(onednn::Bf16Gemm::Native);
  for (onednn::Bf16Gemm mode : modes) {
    onednn::set_bf16_gemm(mode);
    uint64_t seed = 11;
    for (const Shape3& s : kShapes) {
      const double e = product_nmse(s, seed++);
      SCOPED_TRACE(std::string(mode == onednn::Bf16Gemm::Native ? "native" : "widened") +
                   " batch " + std::to_string(s.batch) + " m " + std::to_string(s.m) + " n " +
                   std::to_string(s.n) + " k " + std::to_string(s.k));
      EXPECT_LE(e, kBf16Nmse);
    }
  }
}

}  // namespace
}  // namespace tessel::testing
