// SPDX-License-Identifier: Apache-2.0
// The compute and step cost models' arithmetic on hand-worked cases: the roofline of one op (a
// GEMM at its calibrated efficiency, an element-wise op at the memory bandwidth), the sum over a
// traced graph, the bucket overlap rule and a data-parallel step's terms.
#include "tessel/plan/compute_cost.h"

#include <gtest/gtest.h>

#include "tessel/plan/comm_cost.h"
#include "tessel/plan/step_cost.h"

namespace tessel::plan {
namespace {

// One device of 1e11 FLOP/s and 1e10 B/s; 512^3 GEMMs reach 4e10 (0.4 of the peak); two of them
// per node, 1e9 B/s and 1e-5 s between them.
Cluster toy_cluster() {
  return Cluster::parse(R"(name = "toy"
devices_per_node = 2
nodes = 1
[device]
kind = "toy"
memory_bytes = 1073741824
memory_bandwidth = 1e10
[device.peak_flops]
f32 = 1e11
[links.intra_node]
bandwidth = 1e9
latency = 1e-5
[[gemm]]
dtype = "f32"
m = 512
n = 512
k = 512
flops = 4e10
)",
                        "toy");
}

OpNode gemm_node(int64_t b, int64_t m, int64_t n, int64_t k) {
  OpNode op;
  op.kernel = "gemm";
  op.inputs = {{{b, m, k}, DType::F32, nullptr}, {{k, n}, DType::F32, nullptr}};
  op.outputs = {{{b, m, n}, DType::F32, nullptr}};
  op.cost.flops = op.cost.matmul_flops = 2.0 * double(b * m * n * k);
  op.cost.bytes_read = 4.0 * double(b * m * k + k * n);
  op.cost.bytes_written = 4.0 * double(b * m * n);
  return op;
}

TEST(ComputeCost, GemmRunsAtItsCalibratedRate) {
  const Cluster c = toy_cluster();
  const OpNode op = gemm_node(3, 7, 13, 33);
  const GemmShape g = gemm_shape(op);
  EXPECT_EQ(g.batch, 3);
  EXPECT_EQ(g.m, 7);
  EXPECT_EQ(g.n, 13);
  EXPECT_EQ(g.k, 33);
  const OpTime t = op_time(c, op);
  EXPECT_DOUBLE_EQ(t.efficiency, 0.4);  // the only f32 point
  EXPECT_DOUBLE_EQ(t.compute_seconds, 2.0 * 3 * 7 * 13 * 33 / 4e10);
  EXPECT_DOUBLE_EQ(t.memory_seconds, 4.0 * (3 * 7 * 33 + 33 * 13 + 3 * 7 * 13) / 1e10);
  EXPECT_DOUBLE_EQ(t.seconds, std::max(t.compute_seconds, t.memory_seconds));
}

TEST(ComputeCost, ElementwiseIsBandwidthBound) {
  const Cluster c = toy_cluster();
  OpNode op;
  op.kernel = "binary";
  op.detail = "add";
  op.inputs = {{{13, 7}, DType::BF16, nullptr}};
  op.cost.flops = 91;
  op.cost.bytes_read = 2 * 91 * 2;
  op.cost.bytes_written = 91 * 2;
  EXPECT_EQ(peak_dtype(c, op), "f32");  // no bf16 peak given: the f32 units
  const OpTime t = op_time(c, op);
  EXPECT_DOUBLE_EQ(t.compute_seconds, 91 / 1e11);
  EXPECT_DOUBLE_EQ(t.seconds, 6 * 91 / 1e10);
  Graph graph;
  graph.ops = {op, gemm_node(1, 512, 512, 512)};
  graph.ops[1].phase = Phase::Backward;
  const ComputeTime sum = graph_compute_time(c, graph);
  EXPECT_DOUBLE_EQ(sum.seconds[0], t.seconds);
  EXPECT_DOUBLE_EQ(sum.seconds[1], 2.0 * 512 * 512 * 512 / 4e10);
  EXPECT_DOUBLE_EQ(sum.total(), sum.gemm_seconds + sum.other_seconds);
  EXPECT_DOUBLE_EQ(adamw_seconds(c, 1000), 28 * 1000 / 1e10);
}

TEST(StepCost, BucketsOverlapTheBackward) {
  // Ready at 1 and 2, taking 1.5 and 1: the first ends at 2.5, the second at 3.5.
  EXPECT_DOUBLE_EQ(exposed_after({1, 2}, {1.5, 1}, 3), 0.5);
  EXPECT_DOUBLE_EQ(exposed_after({1, 2}, {0.5, 0.5}, 3), 0);
  EXPECT_THROW(exposed_after({1}, {1, 2}, 3), Error);
}

TEST(StepCost, DataParallelStep) {
  const Cluster c = toy_cluster();
  Graph graph;
  graph.ops = {gemm_node(1, 512, 512, 512), gemm_node(1, 512, 512, 512)};
  graph.ops[1].phase = Phase::Backward;
  MemoryEstimate m;
  m.parameter_count = 1001;
  m.buckets = {{{"b"}, 1001, 1001}};  // one bucket: ready at the end of backward
  MemoryLayout layout;
  layout.dp = 2;
  layout.grad_accum = 3;
  const StepTime t = estimate_step_time(c, graph, m, layout);
  const double gemm = 2.0 * 512 * 512 * 512 / 4e10;
  EXPECT_DOUBLE_EQ(t.compute_seconds, 3 * 2 * gemm);
  EXPECT_DOUBLE_EQ(t.optimizer_seconds, 36 * 1001 / 1e10);
  const int ranks[] = {0, 1};
  const double all_reduce = collective_cost(c, Collective::AllReduce, ranks, 4 * 1001).seconds;
  EXPECT_DOUBLE_EQ(t.dp_comm_seconds, all_reduce);
  // Nothing left to overlap it with (ready at the end of backward: equal up to rounding).
  EXPECT_NEAR(t.dp_exposed_seconds, all_reduce, 1e-12 * t.compute_seconds);
  EXPECT_DOUBLE_EQ(t.total(), t.compute_seconds + t.optimizer_seconds + t.dp_exposed_seconds);
}

}  // namespace
}  // namespace tessel::plan
