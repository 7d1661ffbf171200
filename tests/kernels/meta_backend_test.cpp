// SPDX-License-Identifier: Apache-2.0
// The meta backend: no arithmetic, no memory, one event per kernel with the FLOPs and bytes its
// counting rules give (kernels/meta/meta_backend.cpp), checked against direct counts.
#include "tessel/kernels/meta/meta_backend.h"

#include <gtest/gtest.h>

#include <vector>

#include "tessel/kernels/backend.h"
#include "tessel/kernels/kernel_observer.h"

namespace tessel::kernels {
namespace {

struct Collect final : KernelObserver {
  std::vector<KernelEvent> events;
  void on_kernel(const KernelEvent& e) override { events.push_back(e); }
};

Tensor meta(const Shape& shape, DType dtype = DType::F32) {
  return empty(shape, dtype, Device::meta());
}

TEST(MetaBackend, IsTheBackendOfMetaTensors) {
  EXPECT_EQ(backend_for(Device::meta()).name(), "meta");
  EXPECT_EQ(&backend_for(Device::cpu()), &cpu_backend());
}

TEST(MetaBackend, GemmCountsTwoMnkAndItsOperands) {
  Collect c;
  KernelObserverScope scope(c);
  const int64_t b = 3, m = 7, n = 13, k = 33;
  Tensor a = meta({b, m, k}), w = meta({n, k}, DType::BF16), out = meta({b, m, n});
  GemmDesc d = dense_gemm_desc(b, m, n, k, false, true, /*b_batched=*/false);
  meta_backend().gemm(d, a, w, out);
  d.beta = 1.0;  // accumulating reads C too
  meta_backend().gemm(d, a, w, out);
  ASSERT_EQ(c.events.size(), 2u);
  const KernelEvent& e = c.events[0];
  EXPECT_EQ(e.kernel, "gemm");
  EXPECT_EQ(e.detail, "nt");  // the operands' layout: B stored [n, k]
  EXPECT_DOUBLE_EQ(e.flops, 2.0 * b * m * n * k);
  EXPECT_DOUBLE_EQ(e.matmul_flops, e.flops);
  EXPECT_DOUBLE_EQ(e.bytes_read, 4.0 * b * m * k + 2.0 * n * k);  // w shared by the batch
  EXPECT_DOUBLE_EQ(e.bytes_written, 4.0 * b * m * n);
  EXPECT_DOUBLE_EQ(c.events[1].bytes_read, e.bytes_read + 4.0 * b * m * n);
  ASSERT_EQ(e.inputs.size(), 2u);
  EXPECT_EQ(e.inputs[1].shape, Shape({n, k}));
  EXPECT_EQ(e.outputs[0].storage, out.storage_ptr().get());
}

// Visible pairs against a direct walk over every (query, key) with the mask's own rule.
TEST(MetaBackend, AttentionPairsMatchTheMask) {
  for (int64_t tq : {1, 7, 13}) {
    for (int64_t tk : {13, 33}) {
      for (int64_t window : {0, 1, 5, 40}) {
        for (bool causal : {true, false}) {
          if (!causal && window > 0) continue;
          AttentionDesc d{.batch = 1,
                          .q_len = tq,
                          .kv_len = tk,
                          .heads = 1,
                          .kv_heads = 1,
                          .head_dim = 8,
                          .causal = causal,
                          .window = window};
          double direct = 0;
          for (int64_t i = 0; i < tq; ++i) {
            const int64_t p = i + tk - tq;
            for (int64_t j = 0; j < tk; ++j)
              direct += !causal || (j <= p && (window == 0 || j > p - window));
          }
          EXPECT_EQ(attention_pairs(d), direct) << tq << " " << tk << " " << window << causal;
        }
      }
    }
  }
}

TEST(MetaBackend, AttentionForwardAndBackwardFlops) {
  Collect c;
  KernelObserverScope scope(c);
  const int64_t b = 3, t = 13, h = 4, hkv = 2, dim = 8;
  AttentionDesc d{.batch = b,
                  .q_len = t,
                  .kv_len = t,
                  .heads = h,
                  .kv_heads = hkv,
                  .head_dim = dim,
                  .causal = true,
                  .scale = 0.35};
  Tensor q = meta({b, t, h, dim}), k = meta({b, t, hkv, dim}), v = meta({b, t, hkv, dim});
  Tensor out = meta({b, t, h, dim}), lse = meta({b, h, t}), dq = meta(q.shape());
  Tensor dk = meta(k.shape()), dv = meta(v.shape());
  meta_backend().attention(d, q, k, v, Tensor(), out, lse);
  meta_backend().attention_backward(d, q, k, v, Tensor(), out, lse, out, dq, dk, dv);
  const double pairs = double(b * h) * double(t * (t + 1) / 2);
  ASSERT_EQ(c.events.size(), 2u);
  EXPECT_DOUBLE_EQ(c.events[0].matmul_flops, 4.0 * dim * pairs);
  EXPECT_DOUBLE_EQ(c.events[0].flops, 4.0 * dim * pairs + 5 * pairs);
  EXPECT_DOUBLE_EQ(c.events[1].matmul_flops, 8.0 * dim * pairs);
  EXPECT_DOUBLE_EQ(c.events[1].flops, 10.0 * dim * pairs + 5 * pairs);
  EXPECT_DOUBLE_EQ(c.events[0].bytes_written, double(out.nbytes() + lse.nbytes()));
  EXPECT_DOUBLE_EQ(c.events[1].bytes_read,
                   double(q.nbytes() + k.nbytes() + v.nbytes() + 2 * out.nbytes() + lse.nbytes()));
}

TEST(MetaBackend, ObserversNestAndHostTensorsAreRefused) {
  Collect outer, inner;
  Tensor x = meta({7, 13}), y = meta({7, 13});
  {
    KernelObserverScope a(outer);
    meta_backend().unary(UnaryOp::Gelu, x, y);
    {
      KernelObserverScope b(inner);
      meta_backend().softmax(x, y, false);
      (void)x.clone();  // the tensor layer's copy arrives as an event too
    }
    meta_backend().binary(BinaryOp::Add, x, y, y);
  }
  meta_backend().unary(UnaryOp::Exp, x, y);  // nobody listens
  ASSERT_EQ(outer.events.size(), 2u);
  EXPECT_EQ(outer.events[0].detail, "gelu");
  EXPECT_DOUBLE_EQ(outer.events[0].flops, 7 * 13);
  EXPECT_DOUBLE_EQ(outer.events[1].bytes_read, 2 * 7 * 13 * 4);
  ASSERT_EQ(inner.events.size(), 2u);
  EXPECT_DOUBLE_EQ(inner.events[0].flops, 5 * 7 * 13);
  EXPECT_EQ(inner.events[1].kernel, "copy");
  EXPECT_DOUBLE_EQ(inner.events[1].bytes_written, 7 * 13 * 4);
  Tensor host = zeros({7, 13});
  EXPECT_THROW(meta_backend().unary(UnaryOp::Exp, host, y), Error);
}

// Grouped GEMM: every row multiplied once, whatever the (data-dependent) groups are.
TEST(MetaBackend, GroupedGemmCountsEveryRowOnce) {
  Collect c;
  KernelObserverScope scope(c);
  const int64_t groups = 5, m = 33, k = 13, n = 7;
  Tensor a = meta({m, k}), w = meta({groups, n, k}), offsets = meta({groups + 1}, DType::I64);
  Tensor out = meta({m, n}), dw = meta({groups, k, n});
  meta_backend().grouped_gemm({.trans_b = true}, a, w, offsets, out);
  meta_backend().grouped_gemm({.weight_grad = true}, a, out, offsets, dw);
  ASSERT_EQ(c.events.size(), 2u);
  EXPECT_DOUBLE_EQ(c.events[0].matmul_flops, 2.0 * m * k * n);
  EXPECT_DOUBLE_EQ(c.events[1].matmul_flops, 2.0 * m * k * n);
  EXPECT_DOUBLE_EQ(c.events[0].bytes_written, double(out.nbytes()));
  EXPECT_DOUBLE_EQ(c.events[1].bytes_read, double(a.nbytes() + out.nbytes() + offsets.nbytes()));
}

}  // namespace
}  // namespace tessel::kernels
