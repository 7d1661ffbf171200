// SPDX-License-Identifier: Apache-2.0
// ops::cast: the forward rounds exactly as core's element conversion does (the CPU backend's
// vectorised path and its scalar tail alike, NaN, overflow and subnormals included), and the
// backward carries the gradient back into the input's dtype; cast_kept takes a copy written ahead
// of time as it is, with the same backward.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessel/autograd/engine.h"
#include "tessel/ops/ops.h"

namespace tessel::ops {
namespace {

// 1037 elements: many full SIMD vectors and a tail, spanning normal, subnormal, overflowing and
// special values of both 16-bit formats.
Tensor awkward_values() {
  Tensor x = randn({1037}, DType::F32);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] *= std::ldexp(1.0f, int(i % 41) - 20);
  p[0] = std::numeric_limits<float>::quiet_NaN();
  p[1] = std::numeric_limits<float>::infinity();
  p[2] = -70000.0f;    // beyond f16's largest finite (65504): -inf
  p[3] = 65519.0f;     // rounds down to 65504 in f16
  p[4] = 3.0e-8f;      // an f16 subnormal
  p[5] = 1.00390625f;  // 1 + 2^-8: a bf16 tie, rounds to even (1.0)
  p[6] = -0.0f;
  return x;
}

void expect_same_bits(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.nbytes(), want.nbytes());
  const auto* g = static_cast<const uint16_t*>(got.data_ptr());
  const auto* w = static_cast<const uint16_t*>(want.data_ptr());
  for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(g[i], w[i]) << "element " << i;
}

TEST(Cast, RoundsLikeCoreConversion) {
  const Tensor x = awkward_values();
  for (DType dt : {DType::BF16, DType::F16}) {
    const Tensor y = cast(x, dt);
    ASSERT_EQ(y.dtype(), dt);
    Tensor want = empty(x.shape(), dt);
    convert_elements(x.data_ptr(), DType::F32, want.data_ptr(), dt, size_t(x.numel()));
    expect_same_bits(y, want);
    // Back to f32 is exact.
    const Tensor back = cast(y, DType::F32);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double want_back = load_as_double(y.data_ptr(), dt, size_t(i));
      const float got = back.data<float>()[i];
      if (std::isnan(want_back))
        EXPECT_TRUE(std::isnan(got)) << i;
      else
        EXPECT_EQ(double(got), want_back) << i;
    }
  }
  EXPECT_TRUE(std::isinf(cast(x, DType::F16).to(DType::F32).data<float>()[2]));
  EXPECT_EQ(cast(x, DType::F16).to(DType::F32).data<float>()[3], 65504.0f);
  EXPECT_EQ(cast(x, DType::BF16).to(DType::F32).data<float>()[5], 1.0f);
}

TEST(Cast, GradientReturnsInTheInputDtype) {
  Tensor x = randn({7, 13}, DType::F32);
  x.set_requires_grad(true);
  Tensor w = randn({7, 13}, DType::F32);
  for (DType dt : {DType::BF16, DType::F16}) {
    x.set_grad(Tensor());
    // d/dx sum(cast(x) * cast(w)) = cast(w), rounded to dt and returned as f32.
    Tensor loss = sum(cast(mul(cast(x, dt), cast(w, dt)), DType::F32));
    autograd::backward(loss);
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().dtype(), DType::F32);
    const Tensor w16 = w.to(dt).to(DType::F32);
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(x.grad().data<float>()[i], w16.data<float>()[i]) << dtype_name(dt) << " " << i;
  }
  EXPECT_THROW(cast(zeros({3}, DType::I64), DType::BF16), Error);
}

TEST(Cast, KeptCopyIsUsedAsItIsWithCastsBackward) {
  Tensor x = randn({7, 13}, DType::F32);
  x.set_requires_grad(true);
  const Tensor w = randn({7, 13}, DType::F32);
  for (DType dt : {DType::BF16, DType::F16}) {
    // The gradient through a cast made now, then through a copy written ahead of time.
    x.set_grad(Tensor());
    autograd::backward(sum(cast(mul(cast(x, dt), cast(w, dt)), DType::F32)));
    const Tensor want = x.grad().clone();
    x.set_grad(Tensor());
    const Tensor kept = cast(x.detach(), dt);
    const Tensor y = cast_kept(x, kept);
    EXPECT_EQ(y.data_ptr(), kept.data_ptr()) << "the kept bytes themselves, no conversion";
    EXPECT_TRUE(y.requires_grad());
    EXPECT_FALSE(kept.requires_grad()) << "the graph node is the handle's, not the copy's";
    autograd::backward(sum(cast(mul(y, cast(w, dt)), DType::F32)));
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().dtype(), DType::F32);
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(x.grad().data<float>()[i], want.data<float>()[i]) << dtype_name(dt) << " " << i;
  }
  EXPECT_THROW(cast_kept(x, zeros({7, 12}, DType::BF16)), Error);  // another shape
  EXPECT_THROW(cast_kept(x, x), Error);                            // the same dtype
}

}  // namespace
}  // namespace tessel::ops
