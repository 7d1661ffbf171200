// SPDX-License-Identifier: Apache-2.0
// The compute and step cost models' arithmetic on hand-worked cases: the roofline of one op (a
// GEMM at its calibrated efficiency, an element-wise op at the memory bandwidth), the sum over a
// traced graph, the bucket overlap rule and a data-parallel step's terms.
#include "tessel/plan/compute_cost.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessel/core/error.h"
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
  // By kernel: the profiled step's breakdown is set against these.
  ASSERT_EQ(sum.kernel_seconds.size(), 2u);
  EXPECT_DOUBLE_EQ(sum.kernel_seconds.at("gemm"), sum.seconds[1]);
  EXPECT_DOUBLE_EQ(sum.kernel_seconds.at(op.kernel), t.seconds);
}

TEST(ComputeCost, GradientPassesCountTheNormsRead) {
  // The global norm reads every gradient (4 B), the scaling pass reads and writes it (8 B); a
  // model without the norm's read would give 8 B per element.
  const Cluster c = toy_cluster();
  EXPECT_DOUBLE_EQ(gradient_passes_seconds(c, 1001), (4 + 8) * 1001 / 1e10);
  EXPECT_DOUBLE_EQ(gradient_passes_seconds(c, 0), 0);
}

TEST(StepCost, BucketsOverlapTheBackward) {
  // Ready at 1 and 2, taking 1.5 and 1: the first ends at 2.5, the second at 3.5.
  EXPECT_DOUBLE_EQ(exposed_after({1, 2}, {1.5, 1}, 3), 0.5);
  EXPECT_DOUBLE_EQ(exposed_after({1, 2}, {0.5, 0.5}, 3), 0);
  EXPECT_THROW(exposed_after({1}, {1, 2}, 3), Error);
}

// One 512-cube product in the forward and one in the backward.
Graph forward_and_backward() {
  Graph graph;
  graph.ops = {gemm_node(1, 512, 512, 512), gemm_node(1, 512, 512, 512)};
  graph.ops[1].phase = Phase::Backward;
  return graph;
}

TEST(StepCost, DataParallelStep) {
  const Cluster c = toy_cluster();
  const Graph graph = forward_and_backward();
  MemoryEstimate m;
  m.parameter_count = 1001;
  m.buckets = {{{"b"}, 1001, 1001}};  // one bucket: ready at the end of backward
  MemoryLayout layout;
  layout.dp = 2;
  layout.grad_accum = 3;
  const StepTime t = estimate_step_time(c, graph, m, layout);
  const double gemm = 2.0 * 512 * 512 * 512 / 4e10;
  EXPECT_DOUBLE_EQ(t.compute_seconds, 3 * 2 * gemm);
  EXPECT_DOUBLE_EQ(t.optimizer_seconds, 40 * 1001 / 1e10);
  const int ranks[] = {0, 1};
  const double all_reduce = collective_cost(c, Collective::AllReduce, ranks, 4 * 1001).seconds;
  EXPECT_DOUBLE_EQ(t.dp_comm_seconds, all_reduce);
  // Nothing left to overlap it with (ready at the end of backward: equal up to rounding).
  EXPECT_NEAR(t.dp_exposed_seconds, all_reduce, 1e-12 * t.compute_seconds);
  EXPECT_DOUBLE_EQ(t.total(), t.compute_seconds + t.optimizer_seconds + t.dp_exposed_seconds);
}

// Two buckets, the first ready half-way through the backward: overlapped, only what the second
// outlasts the backward's end is exposed; with the reductions after the backward (Megatron-LM's
// local DDP before 2023), all of both.
TEST(StepCost, GradientReductionsAfterTheBackwardAreAllExposed) {
  const Cluster c = toy_cluster();
  const Graph graph = forward_and_backward();
  MemoryEstimate m;
  m.parameter_count = 2002;
  m.buckets = {{{"b1"}, 1001, 1001}, {{"b0"}, 1001, 1001}};
  MemoryLayout layout;
  layout.dp = 2;
  const StepTime overlapped = estimate_step_time(c, graph, m, layout);
  layout.overlap_grad_reduce = false;
  const StepTime after = estimate_step_time(c, graph, m, layout);
  const int ranks[] = {0, 1};
  const double one = collective_cost(c, Collective::AllReduce, ranks, 4 * 1001).seconds;
  EXPECT_DOUBLE_EQ(after.dp_comm_seconds, 2 * one);
  EXPECT_DOUBLE_EQ(after.dp_exposed_seconds, 2 * one);
  EXPECT_DOUBLE_EQ(overlapped.dp_comm_seconds, 2 * one);
  EXPECT_LT(overlapped.dp_exposed_seconds, after.dp_exposed_seconds);
  EXPECT_NEAR(after.total() - overlapped.total(),
              after.dp_exposed_seconds - overlapped.dp_exposed_seconds, 1e-12 * after.total());
}

// The toy device calibrated: an "nt" GEMM point at half the "nn" rate, a measured curve for
// "binary" and "adamw" calls, 3 us per op outside its kernel, and a measured all-reduce of two
// ranks (t = 50 us + 1 ns/B) that replaces the link model.
Cluster calibrated_toy() {
  Cluster c = toy_cluster();
  c.gemm.push_back({"f32", 512, 512, 512, 2e10, "nt"});
  c.device.op_overhead = 3e-6;
  c.kernels = {{"binary", 1e3, 0, 1e-6},
               {"binary", 1e5, 0, 2e-5},
               {"adamw", 2.8e4, 1.2e4, 5e-6},
               {"adamw", 2.8e6, 1.2e6, 4e-4}};
  c.collectives = {{"all_reduce", 2, 5e-5, 1e-9}};
  return Cluster::parse(c.to_toml(), "calibrated toy");  // and the file keeps every key
}

TEST(ComputeCost, CalibratedKernelsLayoutsAndOverhead) {
  const Cluster c = calibrated_toy();
  EXPECT_EQ(c.kernels.size(), 4u);
  EXPECT_DOUBLE_EQ(c.device.op_overhead, 3e-6);
  OpNode add;
  add.kernel = "binary";
  add.detail = "add";
  add.inputs = {{{50, 50}, DType::F32, nullptr}};
  add.cost = {2500, 0, 6000, 4000, 1};  // 1e4 bytes: roofline 1e-6 s, between the two points
  const OpTime ta = op_time(c, add);
  EXPECT_TRUE(ta.calibrated);
  // Log-log midway between (1e-7 s, 1 us) and (1e-5 s, 20 us).
  EXPECT_NEAR(ta.kernel_seconds, std::sqrt(1e-6 * 2e-5), 1e-18);
  EXPECT_DOUBLE_EQ(ta.seconds, ta.kernel_seconds + 3e-6);
  OpNode nt = gemm_node(1, 512, 512, 512);
  nt.detail = "nt";
  OpNode tn = nt;
  tn.detail = "tn";  // no "tn" points: the "nn" table
  const double flops = 2.0 * 512 * 512 * 512;
  EXPECT_DOUBLE_EQ(op_time(c, nt).efficiency, 0.2);
  EXPECT_DOUBLE_EQ(op_time(c, nt).seconds, flops / 2e10 + 3e-6);
  EXPECT_DOUBLE_EQ(op_time(c, tn).seconds, flops / 4e10 + 3e-6);
  OpNode ln;  // not calibrated: the roofline, and the overhead
  ln.kernel = "layer_norm";
  ln.cost = {8e3, 0, 8e3, 4e3, 1};
  EXPECT_FALSE(op_time(c, ln).calibrated);
  EXPECT_DOUBLE_EQ(op_time(c, ln).seconds, 1.2e4 / 1e10 + 3e-6);

  Graph graph;
  graph.ops = {nt, add, tn, ln};
  graph.ops[2].phase = Phase::Backward;
  const ComputeTime sum = graph_compute_time(c, graph);
  EXPECT_DOUBLE_EQ(sum.overhead_seconds, 4 * 3e-6);
  EXPECT_NEAR(sum.total(), flops / 2e10 + std::sqrt(1e-6 * 2e-5) + flops / 4e10 + 1.2e-6 + 4 * 3e-6,
              1e-15);
  // AdamW: 10 tensors of 1000 elements, each at the curve's first point (2.8e4 bytes).
  EXPECT_DOUBLE_EQ(adamw_seconds(c, 10000, 10), 10 * (5e-6 + 3e-6));
}

// Outside its kernel an op also pays for each byte it writes (calibration's op_overhead_per_byte):
// two ops of the same kernel and FLOPs differ by the bytes they write times the rate, and the
// key survives the file.
TEST(ComputeCost, OverheadGrowsWithTheBytesAnOpWrites) {
  Cluster c = toy_cluster();
  c.device.op_overhead = 3e-6;
  c.device.op_overhead_per_byte = 5e-10;
  c = Cluster::parse(c.to_toml(), "toy with per-byte overhead");
  EXPECT_DOUBLE_EQ(c.device.op_overhead_per_byte, 5e-10);
  OpNode small;
  small.kernel = "layer_norm";
  small.cost = {8e3, 0, 8e3, 4e3, 1};
  OpNode large = small;
  large.cost.bytes_written = 4e5;
  const OpTime ts = op_time(c, small), tl = op_time(c, large);
  EXPECT_DOUBLE_EQ(ts.overhead_seconds, 3e-6 + 4e3 * 5e-10);
  EXPECT_DOUBLE_EQ(tl.overhead_seconds, 3e-6 + 4e5 * 5e-10);
  EXPECT_DOUBLE_EQ(tl.seconds, (8e3 + 4e5) / 1e10 + 3e-6 + 4e5 * 5e-10);
  Graph graph;
  graph.ops = {small, large};
  EXPECT_DOUBLE_EQ(graph_compute_time(c, graph).overhead_seconds, 2 * 3e-6 + (4e3 + 4e5) * 5e-10);
  EXPECT_THROW(Cluster::parse(R"(name = "x"
devices_per_node = 1
nodes = 1
[device]
kind = "x"
memory_bytes = 1024
memory_bandwidth = 1e9
op_overhead_per_byte = -1e-9
[device.peak_flops]
f32 = 1e9
)",
                              "negative"),
               Error);
}

// Stack distance in bytes over the traced order: distinct storages (the addresses are only
// identities, as on the meta device), 1000-byte tensors, a 2500-byte cache.
TEST(ComputeCost, CacheHitsFollowTheReuseDistance) {
  char w[1], a[1], b[1], c[1], d[1];  // storages: a weight and four activations
  auto desc = [](char* s) { return kernels::TensorDesc{{250}, DType::F32, s}; };
  auto node = [&](std::vector<char*> in, std::vector<char*> out) {
    OpNode op;
    op.kernel = "binary";
    for (char* s : in) op.inputs.push_back(desc(s));
    for (char* s : out) op.outputs.push_back(desc(s));
    return op;
  };
  const std::vector<OpNode> ops = {
      node({w}, {a}),     // w never touched before: miss
      node({a}, {b}),     // a: 0 bytes since its write, + its 1000 <= 2500: hit
      node({a, w}, {c}),  // a: read by the op before, hit; w: 2000 bytes since + 1000 > 2500
      node({c}, {d}),     // c just written: hit
      node({b, c}, {a}),  // b: 5000 bytes since the second op wrote it, miss; c: hit
  };
  const std::vector<double> hit = cache_hit_fractions(ops, 2500);
  ASSERT_EQ(hit.size(), 5u);
  EXPECT_DOUBLE_EQ(hit[0], 0.0);
  EXPECT_DOUBLE_EQ(hit[1], 1.0);
  EXPECT_DOUBLE_EQ(hit[2], 0.5);
  EXPECT_DOUBLE_EQ(hit[3], 1.0);
  EXPECT_DOUBLE_EQ(hit[4], 0.5);
  // A larger cache holds everything touched before; none without one.
  EXPECT_EQ(cache_hit_fractions(ops, 1e9), (std::vector<double>{0, 1, 1, 1, 1}));
  EXPECT_EQ(cache_hit_fractions(ops, 0), (std::vector<double>(5, 0.0)));
  // A storage touched again and again in between counts once: w's distance is a's 1000 bytes
  // (+ its own 1000 <= 2500), not the 5000 bytes of a's five touches.
  const std::vector<OpNode> again = {node({w}, {a}), node({a}, {a}), node({a}, {a}),
                                     node({w}, {b})};
  EXPECT_EQ(cache_hit_fractions(again, 2500), (std::vector<double>{0, 1, 1, 1}));
}

// With warm figures an op's kernel time moves from the evicted one towards the warm one by its
// cache hit share: a calibrated kernel along its warm curve, a GEMM at its warm rate; a graph
// gets the shares from the device's cache size; without warm figures nothing changes.
TEST(ComputeCost, WarmFiguresApplyByTheCacheHitShare) {
  Cluster c = toy_cluster();
  c.gemm[0].warm_flops = 8e10;  // 0.8 of the peak in cache, 0.4 evicted
  c.kernels = {{"binary", 1e3, 0, 2e-6, 1e-6}, {"binary", 1e5, 0, 2e-5, 5e-6}};
  c.device.cache_bytes = 1 << 20;
  c = Cluster::parse(c.to_toml(), "toy with warm figures");
  EXPECT_EQ(c.device.cache_bytes, 1 << 20);
  EXPECT_DOUBLE_EQ(c.gemm[0].warm_flops, 8e10);
  EXPECT_DOUBLE_EQ(c.kernels[1].warm_seconds, 5e-6);
  EXPECT_DOUBLE_EQ(c.gemm_efficiency("f32", 512, 512, 512, "nn", true), 0.8);
  EXPECT_DOUBLE_EQ(c.gemm_efficiency("f32", 512, 512, 512, "nn", false), 0.4);

  OpNode add;
  add.kernel = "binary";
  add.cost = {0, 0, 600, 400, 1};  // 1e3 bytes: the first point
  EXPECT_DOUBLE_EQ(op_time(c, add).kernel_seconds, 2e-6);
  EXPECT_DOUBLE_EQ(op_time(c, add, 1).kernel_seconds, 1e-6);
  EXPECT_DOUBLE_EQ(op_time(c, add, 0.25).kernel_seconds, 2e-6 - 0.25 * 1e-6);
  EXPECT_DOUBLE_EQ(op_time(c, add, 0.25).cache_hit, 0.25);
  const OpNode mm = gemm_node(1, 512, 512, 512);
  const double flops = 2.0 * 512 * 512 * 512;
  EXPECT_DOUBLE_EQ(op_time(c, mm).kernel_seconds, flops / 4e10);
  EXPECT_DOUBLE_EQ(op_time(c, mm, 0.5).kernel_seconds, 0.5 * (flops / 4e10 + flops / 8e10));
  EXPECT_DOUBLE_EQ(op_time(c, mm, 0.5).efficiency, 0.6);

  // Through a graph: the second add reads what the first wrote (a hit), the first reads a leaf.
  char x[1], y[1];
  add.inputs = {{{250}, DType::F32, x}};
  add.outputs = {{{100}, DType::F32, y}};
  OpNode next = add;
  next.inputs = {{{100}, DType::F32, y}};
  next.outputs = {{{100}, DType::F32, x}};
  Graph graph;
  graph.ops = {add, next};
  EXPECT_DOUBLE_EQ(graph_compute_time(c, graph).total(), 2e-6 + 1e-6);
  c.device.cache_bytes = 0;
  EXPECT_DOUBLE_EQ(graph_compute_time(c, graph).total(), 2 * 2e-6);
  // A kernel with a point lacking its warm time keeps the evicted curve.
  c.device.cache_bytes = 1 << 20;
  c.kernels[0].warm_seconds = 0;
  EXPECT_DOUBLE_EQ(op_time(c, next, 1).kernel_seconds, 2e-6);
}

// A kernel's curve is chosen by the dtype of the op's first input: bf16 ops read the bf16
// points, a dtype without points of its own (f16 here) the f32 ones; the key survives the file.
TEST(ComputeCost, KernelCurvesByDtype) {
  Cluster c = toy_cluster();
  c.kernels = {{"unary", 1e3, 0, 2e-6, 0, "f32"},
               {"unary", 1e5, 0, 2e-5, 0, "f32"},
               {"unary", 5e2, 0, 3e-6, 0, "bf16"},
               {"unary", 5e4, 0, 3e-5, 0, "bf16"}};
  c = Cluster::parse(c.to_toml(), "toy with bf16 curves");
  ASSERT_EQ(c.kernels.size(), 4u);
  EXPECT_EQ(c.kernels[0].dtype, "f32");
  EXPECT_EQ(c.kernels[3].dtype, "bf16");
  OpNode gelu;
  gelu.kernel = "unary";
  gelu.detail = "gelu";
  gelu.inputs = {{{250}, DType::BF16, nullptr}};
  gelu.cost = {0, 0, 250, 250, 1};  // 500 bytes: the bf16 curve's first point
  EXPECT_DOUBLE_EQ(op_time(c, gelu).kernel_seconds, 3e-6);
  gelu.inputs[0].dtype = DType::F16;
  gelu.cost = {0, 0, 500, 500, 1};  // 1e3 bytes: the f32 curve's first point
  EXPECT_DOUBLE_EQ(op_time(c, gelu).kernel_seconds, 2e-6);
  gelu.inputs[0].dtype = DType::F32;
  EXPECT_DOUBLE_EQ(op_time(c, gelu).kernel_seconds, 2e-6);
}

TEST(StepCost, TensorParallelStepWithCalibratedTerms) {
  const Cluster c = calibrated_toy();
  Graph graph;
  OpNode nt = gemm_node(1, 512, 512, 512);
  nt.detail = "nt";
  graph.ops = {nt};
  graph.parameter_count = 10000;
  graph.parameter_tensors = 10;
  graph.collectives = {{"all_reduce", "tp", 2, 1e5, Phase::Forward},
                       {"all_reduce", "tp", 2, 1e5, Phase::Backward}};
  MemoryEstimate m;
  m.parameter_count = 10000;
  MemoryLayout layout;
  layout.tp = 2;
  layout.grad_accum = 3;
  const StepTime t = estimate_step_time(c, graph, m, layout);
  const double gemm = 2.0 * 512 * 512 * 512 / 2e10 + 3e-6;
  EXPECT_DOUBLE_EQ(t.compute_seconds, 3 * gemm);
  EXPECT_DOUBLE_EQ(t.overhead_seconds, 3 * 3e-6);
  // The measured fit, not the link model: 2 all-reduces x 3 micro-batches x (50 us + 100 us).
  EXPECT_NEAR(t.tp_comm_seconds, 6 * (5e-5 + 1e-9 * 1e5), 1e-15);
  const int pair[] = {0, 1};
  EXPECT_NE(collective_cost(c, Collective::AllReduce, pair, 1e5).seconds, 5e-5 + 1e-4);
  EXPECT_DOUBLE_EQ(step_collective_seconds(c, Collective::AllReduce, pair, 1e5), 5e-5 + 1e-4);
  // No measured send/recv: the link model.
  EXPECT_DOUBLE_EQ(step_collective_seconds(c, Collective::SendRecv, pair, 1e5),
                   collective_cost(c, Collective::SendRecv, pair, 1e5).seconds);
  EXPECT_DOUBLE_EQ(t.optimizer_seconds, 10 * (5e-6 + 3e-6) + 12 * 10000 / 1e10);
  EXPECT_DOUBLE_EQ(t.total(), t.compute_seconds + t.optimizer_seconds + t.tp_comm_seconds);
  EXPECT_EQ(t.load_seconds, 0);  // cpu_share not given: 1
  // Calibrated on a machine where each rank got a quarter of the wall clock: compute and the
  // optimizer wait three times their length for the CPU; the tp all-reduces do not, since their
  // measured fit already holds the wait (stretching them too counted it twice).
  Cluster loaded = c;
  loaded.device.cpu_share = 0.25;
  const StepTime l = estimate_step_time(loaded, graph, m, layout);
  EXPECT_DOUBLE_EQ(l.compute_seconds, t.compute_seconds);
  EXPECT_DOUBLE_EQ(l.tp_comm_seconds, t.tp_comm_seconds);
  EXPECT_NEAR(l.load_seconds, 3 * (t.compute_seconds + t.optimizer_seconds), 1e-15);
  EXPECT_NEAR(l.total(), 4 * (t.compute_seconds + t.optimizer_seconds) + t.tp_comm_seconds, 1e-15);
}

}  // namespace
}  // namespace tessel::plan
