// SPDX-License-Identifier: Apache-2.0
// The host/device per-element code the CUDA kernels run (core/philox.h,
// kernels/shared/elementwise_math.h), compiled for the host and checked against the CPU backend:
// dropout masks bit for bit (the same (seed, offset) must drop the same elements on every
// device), binary ops bit for bit, unary ops and their derivatives and the AdamW update to within
// the CPU kernels' rounding and against the fp64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/op_harness.h"
#include "tessel/core/philox.h"
#include "tessel/core/rng.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/reference/reference_backend.h"
#include "tessel/kernels/shared/elementwise_math.h"

namespace tessel::kernels {
namespace {

using testing::nmse;
using testing::random_tensor;

// The mask the CPU backend applies: dropout of all-ones gives scale where kept, 0 where dropped.
std::vector<bool> cpu_mask(DType dtype, int64_t n, double p, uint64_t seed, uint64_t offset) {
  Tensor x = ones({n}, dtype), y = empty({n}, dtype);
  cpu_backend().dropout(x, y, p, seed, offset);
  Tensor yf = y.to(DType::F32);
  std::vector<bool> keep(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) keep[size_t(i)] = yf.data<float>()[i] != 0.0f;
  return keep;
}

TEST(SharedMath, DropoutMaskEqualsTheCpuKernelBitForBit) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t n : {1, 7, 13, 33, 4096 + 7, 20011}) {
      for (double p : {0.1, 0.5, 0.9, 1.0 / 3.0}) {
        for (uint64_t offset : {uint64_t(0), uint64_t(1), uint64_t(6), uint64_t(1) << 40}) {
          const uint64_t seed = 0x9e3779b97f4a7c15ull ^ uint64_t(n * 31 + offset);
          const std::vector<bool> keep = cpu_mask(dtype, n, p, seed, offset);
          const uint32_t threshold = dropout_threshold(p);
          int64_t kept = 0;
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(keep[size_t(i)], dropout_keeps(seed, offset, uint64_t(i), threshold))
                << dtype_name(dtype) << " n " << n << " p " << p << " offset " << offset
                << " element " << i;
            ASSERT_EQ(keep[size_t(i)], uniform_at(seed, offset, uint64_t(i)) >= float(p));
            kept += keep[size_t(i)];
          }
          if (n > 4096) {
            EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 0.03);
          }
        }
      }
    }
  }
}

TEST(SharedMath, PhiloxMatchesTheKnownAnswer) {
  // Random123's known-answer vector for philox4x32-10: counter and key all ones.
  const PhiloxBlock r = philox4x32_10(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(r.w[0], 0x408f276du);
  EXPECT_EQ(r.w[1], 0x41c83b0eu);
  EXPECT_EQ(r.w[2], 0xa20bc7c6u);
  EXPECT_EQ(r.w[3], 0x6d5451fdu);
}

Tensor map_shared(const Tensor& x, UnaryOp op, double alpha) {
  Tensor y = empty_like(x);
  for (int64_t i = 0; i < x.numel(); ++i)
    y.data<float>()[i] = shared::unary_f32(op, x.data<float>()[i], float(alpha));
  return y;
}

// x in the op's domain: positive for log / sqrt / rsqrt / pow.
Tensor unary_input(UnaryOp op, int64_t n) {
  Generator gen(uint64_t(op) + 11);
  Tensor x = random_tensor(gen, {n}, DType::F32, 3.0);
  const bool positive =
      op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt || op == UnaryOp::Pow;
  for (int64_t i = 0; positive && i < n; ++i)
    x.data<float>()[i] = std::fabs(x.data<float>()[i]) + 0.05f;
  return x;
}

constexpr UnaryOp kUnaryOps[] = {
    UnaryOp::Neg,  UnaryOp::Exp,    UnaryOp::Log,   UnaryOp::Sqrt,      UnaryOp::Rsqrt,
    UnaryOp::Abs,  UnaryOp::Square, UnaryOp::Tanh,  UnaryOp::Sigmoid,   UnaryOp::Relu,
    UnaryOp::Gelu, UnaryOp::Silu,   UnaryOp::Scale, UnaryOp::AddScalar, UnaryOp::Pow};

// The CPU kernels may fuse multiply-adds where this host build does not, which moves results by
// a few ulp and, where terms cancel (1 - tanh^2 near saturation, a moment whose two terms nearly
// cancel), by more relative to the small result: elements must agree to 1e-4 relative or 1e-6 of
// the largest magnitude. A wrong formula misses that by orders of magnitude.
float largest(const Tensor& t) {
  float m = 0.0f;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::fmax(m, std::fabs(t.data<float>()[i]));
  return m;
}

bool close(float a, float b, float scale) {
  if (a == b || (std::isnan(a) && std::isnan(b))) return true;
  return std::fabs(a - b) <= 1e-4f * std::fabs(b) + 1e-6f * scale;
}

TEST(SharedMath, UnaryMatchesTheCpuKernelAndTheReference) {
  for (UnaryOp op : kUnaryOps) {
    for (double alpha : {0.0, 0.5, 2.0, 1.7}) {
      if (op != UnaryOp::Scale && op != UnaryOp::AddScalar && op != UnaryOp::Pow && alpha != 0.0)
        continue;
      const Tensor x = unary_input(op, 4096 + 7);
      Tensor cpu = empty_like(x);
      cpu_backend().unary(op, x, cpu, alpha);
      const Tensor got = map_shared(x, op, alpha);
      for (int64_t i = 0; i < x.numel(); ++i)
        ASSERT_TRUE(close(got.data<float>()[i], cpu.data<float>()[i], largest(cpu)))
            << unary_name(op) << " alpha " << alpha << " x " << x.data<float>()[i] << ": "
            << got.data<float>()[i] << " vs cpu " << cpu.data<float>()[i];
      const Tensor x64 = x.to(DType::F64);
      Tensor want = empty_like(x64);
      reference_backend().unary(op, x64, want, alpha);
      EXPECT_LT(nmse(got.to(DType::F64), want), 1e-12) << unary_name(op) << " alpha " << alpha;
    }
  }
}

TEST(SharedMath, UnaryGradientMatchesTheCpuKernelAndTheReference) {
  for (UnaryOp op : kUnaryOps) {
    for (double alpha : {0.0, 2.0, 1.7}) {
      if (op != UnaryOp::Scale && op != UnaryOp::AddScalar && op != UnaryOp::Pow && alpha != 0.0)
        continue;
      const Tensor x = unary_input(op, 4096 + 7);
      Generator gen(99);
      const Tensor dy = random_tensor(gen, x.shape(), DType::F32);
      Tensor y = empty_like(x), cpu = empty_like(x);
      cpu_backend().unary(op, x, y, alpha);
      cpu_backend().unary_backward(op, x, y, dy, cpu, alpha);
      Tensor got = empty_like(x);
      for (int64_t i = 0; i < x.numel(); ++i)
        got.data<float>()[i] = shared::unary_grad_f32(op, x.data<float>()[i], y.data<float>()[i],
                                                      dy.data<float>()[i], float(alpha));
      for (int64_t i = 0; i < x.numel(); ++i)
        ASSERT_TRUE(close(got.data<float>()[i], cpu.data<float>()[i], largest(cpu)))
            << unary_name(op) << " alpha " << alpha << " x " << x.data<float>()[i] << ": "
            << got.data<float>()[i] << " vs cpu " << cpu.data<float>()[i];
      const Tensor x64 = x.to(DType::F64), dy64 = dy.to(DType::F64);
      Tensor y64 = empty_like(x64), want = empty_like(x64);
      reference_backend().unary(op, x64, y64, alpha);
      reference_backend().unary_backward(op, x64, y64, dy64, want, alpha);
      EXPECT_LT(nmse(got.to(DType::F64), want), 1e-11) << unary_name(op) << " alpha " << alpha;
    }
  }
}

TEST(SharedMath, BinaryEqualsTheCpuKernelBitForBit) {
  Generator gen(5);
  const Tensor a = random_tensor(gen, {33, 13}, DType::F32);
  const Tensor b = random_tensor(gen, {33, 13}, DType::F32);
  a.data<float>()[3] = std::nanf("");
  b.data<float>()[7] = std::nanf("");
  for (BinaryOp op :
       {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min}) {
    Tensor cpu = empty_like(a);
    cpu_backend().binary(op, a, b, cpu);
    for (int64_t i = 0; i < a.numel(); ++i) {
      const float got = shared::binary_f32(op, a.data<float>()[i], b.data<float>()[i]);
      const float want = cpu.data<float>()[i];
      ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want)))
          << binary_name(op) << " element " << i << ": " << got << " vs cpu " << want;
    }
  }
}

TEST(SharedMath, AdamWUpdateMatchesTheCpuKernel) {
  for (double wd : {0.0, 0.1}) {
    for (int64_t step : {1, 2, 1000}) {
      Generator gen(uint64_t(step) + 3);
      const int64_t n = 4096 + 7;
      Tensor p = random_tensor(gen, {n}, DType::F32), g = random_tensor(gen, {n}, DType::F32);
      Tensor m = random_tensor(gen, {n}, DType::F32, 0.1);
      Tensor v = random_tensor(gen, {n}, DType::F32, 0.1);
      for (int64_t i = 0; i < n; ++i) v.data<float>()[i] = std::fabs(v.data<float>()[i]);
      AdamWParams h;
      h.lr = 3e-3;
      h.weight_decay = wd;
      h.step = step;
      Tensor pg = p.clone(), mg = m.clone(), vg = v.clone();
      const shared::AdamWConstants k = shared::adamw_constants(h, wd);
      for (int64_t i = 0; i < n; ++i)
        pg.data<float>()[i] = shared::adamw_update(k, pg.data<float>()[i], g.data<float>()[i],
                                                   mg.data<float>()[i], vg.data<float>()[i]);
      cpu_backend().adamw(p, g, m, v, h);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(close(pg.data<float>()[i], p.data<float>()[i], largest(p))) << "param " << i;
        ASSERT_TRUE(close(mg.data<float>()[i], m.data<float>()[i], largest(m))) << "m " << i;
        ASSERT_TRUE(close(vg.data<float>()[i], v.data<float>()[i], largest(v))) << "v " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tessel::kernels
