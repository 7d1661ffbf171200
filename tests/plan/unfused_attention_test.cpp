// SPDX-License-Identifier: Apache-2.0
// Unfused attention's cost (plan/unfused_attention.h) against the kernels counted by hand on odd
// shapes (grouped-query heads, s_q != s_k), its time as the sum of the products' and the scores'
// traffic, and a traced step with TraceOptions::unfused_attention: every attention node re-costed,
// the full score matrices multiplied (the masked half too), everything else and the memory the
// same as the fused trace's.
#include "tessel/plan/unfused_attention.h"

#include <gtest/gtest.h>

#include "tessel/models/family.h"
#include "tessel/plan/compute_cost.h"
#include "tessel/plan/trace.h"

namespace tessel::plan {
namespace {

// b 2, s_q 7, s_k 13, 6 query heads over 3 key/value heads, d 5, d_v 5: E = 2 * 6 * 7 * 13 = 1092
// scores; bf16: 2 bytes each.
constexpr double kScores = 2.0 * 6 * 7 * 13;

OpNode node(const char* kernel) {
  OpNode op;
  op.kernel = kernel;
  op.inputs = {{{2, 7, 6, 5}, DType::BF16, nullptr},
               {{2, 13, 3, 5}, DType::BF16, nullptr},
               {{2, 13, 3, 5}, DType::BF16, nullptr}};
  op.cost = {100, 60, 1000, 500, 1};  // the fused kernel's own figures
  return op;
}

TEST(UnfusedAttention, ForwardCountsBothFullProductsTheSoftmaxAndTheScoresTraffic) {
  const OpNode op = node("attention");
  EXPECT_TRUE(is_attention(op));
  EXPECT_FALSE(is_unfused_attention(op));
  const ScoreShape s = score_shape(op);
  EXPECT_EQ(s.s_q, 7);
  EXPECT_EQ(s.s_k, 13);
  EXPECT_EQ(s.d, 5);
  const Cost c = unfused_attention_cost(op);
  // QKᵀ: 2·E·d; PV: 2·E·d_v; softmax: 5 per score.
  EXPECT_DOUBLE_EQ(c.matmul_flops, 2 * kScores * 5 + 2 * kScores * 5);
  EXPECT_DOUBLE_EQ(c.flops, 20 * kScores + 5 * kScores);
  // Scores written by QKᵀ, read and written (as probabilities) by the softmax, read by PV.
  EXPECT_DOUBLE_EQ(c.bytes_read, 1000 + 2 * kScores * 2);
  EXPECT_DOUBLE_EQ(c.bytes_written, 500 + 2 * kScores * 2);
  EXPECT_EQ(c.ops, 1);
}

TEST(UnfusedAttention, BackwardCountsFourProductsAndTheSoftmaxBackward) {
  const Cost c = unfused_attention_cost(node("attention_backward"));
  // dP = dO Vᵀ and dV = Pᵀ dO: 2·E·d_v each; dQ = dS K and dK = dSᵀ Q: 2·E·d each.
  EXPECT_DOUBLE_EQ(c.matmul_flops, 4 * kScores * (5 + 5));
  EXPECT_DOUBLE_EQ(c.flops, 40 * kScores + 4 * kScores);
  // Reads: P and dP by the softmax's backward, dS by dQ and dK, P by dV; writes dP and dS.
  EXPECT_DOUBLE_EQ(c.bytes_read, 1000 + 5 * kScores * 2);
  EXPECT_DOUBLE_EQ(c.bytes_written, 500 + 2 * kScores * 2);
}

TEST(UnfusedAttention, ItsTimeIsTheProductsAtTheGemmRatePlusTheTraffic) {
  const Cluster c = Cluster::parse(R"(name = "toy"
devices_per_node = 1
nodes = 1
[device]
kind = "toy"
memory_bytes = 1073741824
memory_bandwidth = 1e10
[device.peak_flops]
f32 = 1e11
bf16 = 4e11
[[gemm]]
dtype = "bf16"
m = 512
n = 512
k = 512
flops = 2e11
)",
                                   "toy");
  OpNode op = node("attention");
  op.cost = unfused_attention_cost(op);
  op.detail = kUnfusedDetail;
  ASSERT_TRUE(is_unfused_attention(op));
  const OpTime t = op_time(c, op);
  EXPECT_DOUBLE_EQ(t.efficiency, 0.5);
  EXPECT_DOUBLE_EQ(t.compute_seconds, op.cost.flops / 2e11);
  EXPECT_DOUBLE_EQ(t.memory_seconds, (op.cost.bytes_read + op.cost.bytes_written) / 1e10);
  EXPECT_DOUBLE_EQ(t.kernel_seconds, t.compute_seconds + t.memory_seconds);
  // The fused node: one kernel at its roofline, the tensor cores' peak.
  const OpTime fused = op_time(c, node("attention"));
  EXPECT_DOUBLE_EQ(fused.kernel_seconds, std::max(100 / 4e11, 1500 / 1e10));
}

TEST(UnfusedAttention, ATracedStepRecostsEveryAttentionNodeAndNothingElse) {
  const models::ConfigPtr config = models::family_named("llama").preset("tiny");
  TraceOptions options;
  options.batch = 3;
  options.seq = 13;
  options.compute_dtype = DType::BF16;
  const Graph fused = trace_training_step(*config, options);
  options.unfused_attention = true;
  const Graph unfused = trace_training_step(*config, options);
  ASSERT_EQ(fused.ops.size(), unfused.ops.size());
  int attention = 0;
  for (size_t i = 0; i < fused.ops.size(); ++i) {
    const OpNode& f = fused.ops[i];
    const OpNode& u = unfused.ops[i];
    EXPECT_EQ(f.kernel, u.kernel);
    if (!is_attention(f)) {
      EXPECT_EQ(f.cost, u.cost) << f.kernel;
      EXPECT_EQ(f.detail, u.detail);
      continue;
    }
    ++attention;
    EXPECT_TRUE(is_unfused_attention(u));
    EXPECT_EQ(u.cost, unfused_attention_cost(f));
    // The fused kernel multiplies the causal pairs, s (s + 1) / 2 of s² per head; unfused, all.
    EXPECT_DOUBLE_EQ(u.cost.matmul_flops, f.cost.matmul_flops * 2.0 * 13 / 14);
  }
  EXPECT_EQ(attention, 2 * config->num_layers());  // a forward and a backward a block
  EXPECT_EQ(fused.step_peak_bytes, unfused.step_peak_bytes);
  EXPECT_EQ(fused.saved_bytes, unfused.saved_bytes);
}

}  // namespace
}  // namespace tessel::plan
