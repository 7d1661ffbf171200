// SPDX-License-Identifier: Apache-2.0
// Sliding-window attention and rotary embeddings beyond the case table: a window >= Tk gives the
// unwindowed kernels' results bit for bit; a windowed decode step is the unwindowed step with
// the keys before the window padded out (the window's meaning, independently of either
// backend's mask code) and equals the matching row of the windowed prefill; the rotation is
// undone by its inverse, in place is the same as out of place, and both backends refuse bad
// windows and positions with messages naming the values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "common/error_text.h"
#include "common/tolerance.h"
#include "op_harness.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::testing {
namespace {

using kernels::AttentionDesc;
using kernels::Backend;

using tessel::test::expect_error;

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

struct AttnRun {
  Tensor out, lse, dq, dk, dv;
};

AttnRun run_attention(Backend& be, const AttentionDesc& d, const Tensor& q, const Tensor& k,
                      const Tensor& v, const Tensor& mask, const Tensor& dout) {
  DType dt = q.dtype();
  AttnRun r{zeros(q.shape(), dt), zeros({d.batch, d.heads, d.q_len}, kernels::stat_dtype(dt)),
            zeros(q.shape(), dt), zeros(k.shape(), dt), zeros(v.shape(), dt)};
  be.attention(d, q, k, v, mask, r.out, r.lse);
  if (dout.defined()) be.attention_backward(d, q, k, v, mask, r.out, r.lse, dout, r.dq, r.dk, r.dv);
  return r;
}

// A window that covers every key (= Tk, or larger) runs exactly the unwindowed computation.
TEST(SlidingWindow, WindowCoveringAllKeysIsNoWindowBitForBit) {
  const int64_t b = 2, t = 150, h = 6, hkv = 2, dim = 32;
  for (DType dt : {DType::F32, DType::F64, DType::BF16}) {
    Generator gen(11);
    Tensor q = random_tensor(gen, {b, t, h, dim}, dt), k = random_tensor(gen, {b, t, hkv, dim}, dt);
    Tensor v = random_tensor(gen, {b, t, hkv, dim}, dt), g = random_tensor(gen, {b, t, h, dim}, dt);
    AttentionDesc d{b, t, t, h, hkv, dim, true, 1.0 / std::sqrt(double(dim))};
    AttnRun base = run_attention(kernels::cpu_backend(), d, q, k, v, Tensor(), g);
    for (int64_t window : {t, t + 1, int64_t(1) << 40}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " window " + std::to_string(window));
      d.window = window;
      AttnRun w = run_attention(kernels::cpu_backend(), d, q, k, v, Tensor(), g);
      EXPECT_TRUE(bitwise_equal(w.out, base.out));
      EXPECT_TRUE(bitwise_equal(w.lse, base.lse));
      EXPECT_TRUE(bitwise_equal(w.dq, base.dq));
      EXPECT_TRUE(bitwise_equal(w.dk, base.dk));
      EXPECT_TRUE(bitwise_equal(w.dv, base.dv));
    }
  }
}

// One query at position Tk - 1 with window w sees keys Tk - w .. Tk - 1: the same as no window
// with the earlier keys padded out, on both backends, forward and backward.
TEST(SlidingWindow, DecodeStepIsTheUnwindowedStepWithEarlierKeysPadded) {
  const int64_t b = 2, tk = 300, h = 4, hkv = 1, dim = 16;
  Generator gen(12);
  Tensor q = random_tensor(gen, {b, 1, h, dim}, DType::F64);
  Tensor k = random_tensor(gen, {b, tk, hkv, dim}, DType::F64);
  Tensor v = random_tensor(gen, {b, tk, hkv, dim}, DType::F64);
  Tensor g = random_tensor(gen, {b, 1, h, dim}, DType::F64);
  for (int64_t window : {1, 5, 64, 100, 299}) {
    SCOPED_TRACE("window " + std::to_string(window));
    Tensor mask = ones({b, tk}, DType::I8);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t j = 0; j < tk - window; ++j) mask.data<int8_t>()[bi * tk + j] = 0;
    AttentionDesc plain{b, 1, tk, h, hkv, dim, true, 0.25};
    AttentionDesc windowed = plain;
    windowed.window = window;
    for (Backend* be : {&kernels::cpu_backend(), &kernels::reference_backend()}) {
      SCOPED_TRACE(std::string(be->name()));
      AttnRun want = run_attention(*be, plain, q, k, v, mask, g);
      AttnRun got = run_attention(*be, windowed, q, k, v, Tensor(), g);
      EXPECT_LT(nmse(got.out, want.out), 1e-26);
      EXPECT_LT(nmse(got.lse, want.lse), 1e-26);
      EXPECT_LT(nmse(got.dv, want.dv), 1e-26);
      if (window > 1) {  // one key: dq and dk vanish
        EXPECT_LT(nmse(got.dq, want.dq), 1e-26);
        EXPECT_LT(nmse(got.dk, want.dk), 1e-26);
      }
    }
  }
}

// Decoding against a KV cache with a window gives the windowed prefill's row at that position.
TEST(SlidingWindow, DecodeStepsMatchTheWindowedPrefillRows) {
  const int64_t t = 130, h = 6, hkv = 2, dim = 64, window = 37;
  Generator gen(13);
  Tensor q = random_tensor(gen, {1, t, h, dim}, DType::F32);
  Tensor k = random_tensor(gen, {1, t, hkv, dim}, DType::F32);
  Tensor v = random_tensor(gen, {1, t, hkv, dim}, DType::F32);
  AttentionDesc d{1, t, t, h, hkv, dim, true, 0.125, window};
  AttnRun full = run_attention(kernels::cpu_backend(), d, q, k, v, Tensor(), Tensor());
  // Two f32 evaluations that may block the 37 keys and 64 dims differently (see
  // gemm_attention_test.cpp's decode test): the derived reorder bound for 64 terms, 2 stages.
  const double rel = tessel::test::reorder_tolerance(DType::F32, dim, 2);
  for (int64_t pos : {int64_t(0), int64_t(20), window - 1, window, int64_t(100), t - 1}) {
    for (int64_t rows : {int64_t(1), int64_t(3)}) {
      if (pos + 1 < rows) continue;
      SCOPED_TRACE("position " + std::to_string(pos) + " rows " + std::to_string(rows));
      // Queries pos - rows + 1 .. pos against the cache of keys 0 .. pos.
      AttentionDesc step = d;
      step.q_len = rows;
      step.kv_len = pos + 1;
      Tensor qs = q.narrow(1, pos - rows + 1, rows).clone();
      Tensor ks = k.narrow(1, 0, pos + 1).clone(), vs = v.narrow(1, 0, pos + 1).clone();
      AttnRun s = run_attention(kernels::cpu_backend(), step, qs, ks, vs, Tensor(), Tensor());
      EXPECT_LT(nmse(s.out, full.out.narrow(1, pos - rows + 1, rows)), rel * rel);
    }
  }
}

TEST(SlidingWindow, BadWindowsRejectedByBothBackends) {
  Tensor q = zeros({1, 5, 2, 8}, DType::F64), k = zeros({1, 5, 2, 8}, DType::F64);
  Tensor out = zeros({1, 5, 2, 8}, DType::F64), lse = zeros({1, 2, 5}, DType::F64);
  for (Backend* be : {&kernels::cpu_backend(), &kernels::reference_backend()}) {
    SCOPED_TRACE(std::string(be->name()));
    AttentionDesc d{1, 5, 5, 2, 2, 8, false, 0.3, 3};
    expect_error([&] { be->attention(d, q, k, k, Tensor(), out, lse); },
                 {"attention", "window 3", "causal"});
    d.causal = true;
    d.window = -2;
    expect_error([&] { be->attention(d, q, k, k, Tensor(), out, lse); },
                 {"attention", "window", "-2"});
    expect_error([&] { be->attention_backward(d, q, k, k, Tensor(), out, lse, out, out, q, k); },
                 {"attention_backward", "window", "-2"});
  }
}

Tensors rope_tables(int64_t rows, int64_t dim, DType dtype) {
  Tensor c = empty({rows, dim / 2}, DType::F64), s = empty({rows, dim / 2}, DType::F64);
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t i = 0; i < dim / 2; ++i) {
      double a = double(p) * std::pow(500000.0, -2.0 * double(i) / double(dim));
      c.data<double>()[p * (dim / 2) + i] = std::cos(a);
      s.data<double>()[p * (dim / 2) + i] = std::sin(a);
    }
  return {c.to(dtype), s.to(dtype)};
}

// inverse(rope(x)) = x up to rounding, and rope(x) written over x equals rope(x) into a new
// tensor bit for bit, in every dtype.
TEST(Rope, InverseUndoesTheRotationAndInPlaceMatches) {
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Generator gen(21);
    const int64_t b = 3, t = 13, h = 7, dim = 34, p = 64;
    Tensors tab = rope_tables(p, dim, kernels::stat_dtype(dt));
    Tensor x = random_tensor(gen, {b, t, h, dim}, dt), pos = random_ids(gen, {b, t}, p);
    Tensor y = zeros(x.shape(), dt), back = zeros(x.shape(), dt);
    Backend& be = kernels::cpu_backend();
    be.rope(x, tab[0], tab[1], pos, false, y);
    be.rope(y, tab[0], tab[1], pos, true, back);
    // Two rotations: a few roundings of the dtype per element (each |c|, |s| <= 1).
    const double u = tessel::test::unit_roundoff(dt);
    EXPECT_LT(nmse(back, x), 64 * u * u);
    Tensor inplace = x.clone();
    be.rope(inplace, tab[0], tab[1], pos, false, inplace);
    EXPECT_TRUE(bitwise_equal(inplace, y));
  }
}

// Position 0 is the identity (cos 1, sin 0), and a rotation keeps each pair's length.
TEST(Rope, PositionZeroIsIdentityAndPairsKeepTheirLength) {
  Generator gen(22);
  const int64_t b = 2, t = 5, h = 3, dim = 8;
  Tensors tab = rope_tables(100, dim, DType::F64);
  Tensor x = random_tensor(gen, {b, t, h, dim}, DType::F64);
  Tensor zero = zeros({b, t}, DType::I32), pos = random_ids(gen, {b, t}, 100, DType::I32);
  Tensor y = zeros(x.shape(), DType::F64);
  kernels::cpu_backend().rope(x, tab[0], tab[1], zero, false, y);
  EXPECT_TRUE(bitwise_equal(y, x));
  kernels::cpu_backend().rope(x, tab[0], tab[1], pos, false, y);
  const double* xp = x.data<double>();
  const double* yp = y.data<double>();
  for (int64_t r = 0; r < b * t * h; ++r)
    for (int64_t i = 0; i < dim / 2; ++i) {
      double a1 = xp[r * dim + i], a2 = xp[r * dim + dim / 2 + i];
      double b1 = yp[r * dim + i], b2 = yp[r * dim + dim / 2 + i];
      EXPECT_NEAR(b1 * b1 + b2 * b2, a1 * a1 + a2 * a2, 1e-12 * (1 + a1 * a1 + a2 * a2));
    }
}

TEST(Rope, BadInputRejectedByBothBackends) {
  Tensor x = zeros({2, 3, 2, 4}, DType::F64), out = zeros({2, 3, 2, 4}, DType::F64);
  Tensor c = zeros({10, 2}, DType::F64);
  for (Backend* be : {&kernels::cpu_backend(), &kernels::reference_backend()}) {
    SCOPED_TRACE(std::string(be->name()));
    Tensor pos = zeros({2, 3}, DType::I32);
    pos.data<int32_t>()[4] = 10;
    expect_error([&] { be->rope(x, c, c, pos, false, out); },
                 {"rope", "position 10", "[1, 1]", "[0, 10)"});
    Tensor pos_ok = zeros({2, 3}, DType::I64);
    Tensor bad_out = zeros({2, 3, 2, 4}, DType::F32);
    expect_error([&] { be->rope(x, c, c, pos_ok, false, bad_out); }, {"rope", "out", "f32"});
    Tensor c3 = zeros({10, 3}, DType::F64);
    expect_error([&] { be->rope(x, c3, c3, pos_ok, false, out); },
                 {"rope", "cos", "[10, 3]", "[P, 2]"});
  }
}

}  // namespace
}  // namespace tessel::testing
