// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/step_cost.h"

#include <algorithm>
#include <numeric>

#include "tessel/core/error.h"
#include "tessel/plan/comm_cost.h"

namespace tessel::plan {

double exposed_after(const std::vector<double>& ready, const std::vector<double>& bucket_seconds,
                     double end) {
  TESSEL_CHECK(ready.size() == bucket_seconds.size(), "exposed_after: ", ready.size(),
               " ready times for ", bucket_seconds.size(), " buckets");
  double t = 0;
  for (size_t i = 0; i < ready.size(); ++i) t = std::max(t, ready[i]) + bucket_seconds[i];
  return std::max(0.0, t - end);
}

double step_collective_seconds(const Cluster& cluster, Collective op, std::span<const int> ranks,
                               double bytes) {
  if (ranks.size() > 1 && (op == Collective::AllReduce || op == Collective::SendRecv)) {
    bool one_node = true;
    for (int r : ranks) one_node = one_node && cluster.node_of(r) == cluster.node_of(ranks[0]);
    const CollectiveFit* fit = cluster.measured_collective(collective_name(op), int(ranks.size()));
    if (one_node && fit) return fit->alpha + fit->beta * bytes;
  }
  return collective_cost(cluster, op, ranks, bytes).seconds;
}

double collectives_seconds(const Cluster& cluster, const Graph& graph, const std::string& axis,
                           std::span<const int> ranks) {
  double t = 0;
  for (const CollectiveNode& c : graph.collectives) {
    if (c.axis != axis || c.op == "barrier") continue;
    std::string op = c.op;
    if (op == "all_gather_v") op = "all_gather";
    if (op == "all_to_all_v") op = "all_to_all";
    if (op == "send" || op == "recv") op = "send_recv";
    t += step_collective_seconds(cluster, collective_from_name(op), ranks, c.bytes);
  }
  return t;
}

namespace {

// The CPU-bound terms (compute, optimizer, and the bubble, which is other ranks' compute)
// stretched by the share of the CPU the ranks got under calibration. The communication terms are
// not: calibration timed the collectives and links by the wall clock on the same loaded machine,
// so the wait for a core (and for the peer's) is already in their fits; stretching them again
// counted that wait twice.
StepTime with_load(const Cluster& cluster, StepTime s) {
  s.load_seconds = (s.compute_seconds + s.optimizer_seconds + s.bubble_seconds) *
                   (1.0 / cluster.device.cpu_share - 1.0);
  return s;
}

}  // namespace

PipelineTime pipeline_time(const std::vector<double>& busy, int microbatches, int virtual_stages) {
  TESSEL_CHECK(!busy.empty() && microbatches >= 1 && virtual_stages >= 1,
               "pipeline_time: ", busy.size(), " ranks, ", microbatches, " micro-batches, ",
               virtual_stages, " chunks per rank");
  double most = 0, sum = 0;
  for (double b : busy) {
    most = std::max(most, b);
    sum += b;
  }
  PipelineTime t;
  t.makespan = double(microbatches) * most + (sum - most) / double(virtual_stages);
  if (t.makespan > 0)
    t.bubble_fraction = 1.0 - double(microbatches) * sum / (double(busy.size()) * t.makespan);
  return t;
}

double tp_collectives_seconds(const Cluster& cluster, const Graph& graph, int tp) {
  if (tp <= 1) return 0;
  std::vector<int> group(static_cast<size_t>(tp));
  std::iota(group.begin(), group.end(), 0);
  return collectives_seconds(cluster, graph, "tp", group);
}

StepTime estimate_step_time(const Cluster& cluster, const Graph& graph,
                            const MemoryEstimate& memory, const MemoryLayout& layout) {
  return estimate_step_time(cluster, graph_compute_time(cluster, graph),
                            tp_collectives_seconds(cluster, graph, layout.tp) *
                                (layout.pipeline.active() ? 1.0 : double(layout.grad_accum)),
                            graph.parameter_tensors, memory, layout);
}

StepTime estimate_step_time(const Cluster& cluster, const ComputeTime& compute, double tp_seconds,
                            int64_t parameter_tensors, const MemoryEstimate& memory,
                            const MemoryLayout& layout) {
  const int dp = layout.dp;
  const int tp = layout.tp;
  const int stage = dp > 1 ? layout.zero_stage : 0;
  StepTime s;
  s.compute_seconds = compute.total() * double(layout.grad_accum);
  s.overhead_seconds = compute.overhead_seconds * double(layout.grad_accum);
  if (tp > 1) s.tp_comm_seconds = tp_seconds;
  const double psi = double(memory.parameter_count);
  double padded = 0;
  for (const BucketPlan& b : memory.buckets) padded += double(b.padded);
  const double updated = stage >= 1 ? padded / dp : psi;
  // The update, and the gradient norm's and the scaling's passes over the gradients.
  s.optimizer_seconds =
      adamw_seconds(cluster, updated, double(std::max<int64_t>(parameter_tensors, 1))) +
      gradient_passes_seconds(cluster, updated);
  if (dp == 1) return with_load(cluster, s);

  std::vector<int> ranks;
  for (int r = 0; r < dp; ++r) ranks.push_back(r * tp);
  auto cost = [&](Collective op, double bytes) {
    return step_collective_seconds(cluster, op, ranks, bytes);
  };
  // Gradient buckets: ready as the last micro-batch's backward passes their parameters (buckets
  // hold parameters in reverse model order, the order backward finishes them).
  const double backward =
      compute.seconds[size_t(Phase::Backward)] + compute.seconds[size_t(Phase::Recompute)];
  std::vector<double> ready, seconds;
  double done = 0;
  for (const BucketPlan& b : memory.buckets) {
    done += double(b.numel);
    ready.push_back(backward * done / psi);
    seconds.push_back(stage >= 2 ? cost(Collective::ReduceScatter, 4 * double(b.padded))
                                 : cost(Collective::AllReduce, 4 * double(b.numel)));
  }
  for (double x : seconds) s.dp_comm_seconds += x;
  s.dp_exposed_seconds =
      layout.overlap_grad_reduce ? exposed_after(ready, seconds, backward) : s.dp_comm_seconds;
  if (stage == 1 || stage == 2) {
    // The updated blocks all-gathered after the update: nothing left to overlap with.
    for (const BucketPlan& b : memory.buckets) {
      const double g = cost(Collective::AllGather, 4 * double(b.padded));
      s.dp_comm_seconds += g;
      s.dp_exposed_seconds += g;
    }
  } else if (stage == 3) {
    // Each unit gathered before its forward and again for its backward of every micro-batch;
    // the next unit's gather runs while the current one computes, so a gather is exposed only
    // by what it outlasts its predecessor's compute (the first one wholly).
    const double passes = 2.0 * double(layout.grad_accum);
    const double per_unit = compute.total() / (2.0 * double(memory.buckets.size()));
    double exposed = 0, total = 0;
    for (size_t i = 0; i < memory.buckets.size(); ++i) {
      const double g = cost(Collective::AllGather, 4 * double(memory.buckets[i].padded));
      total += g;
      exposed += i == 0 ? g : std::max(0.0, g - per_unit);
    }
    s.dp_comm_seconds += passes * total;
    s.dp_exposed_seconds += passes * exposed;
  }
  return with_load(cluster, s);
}

PipelineRankCost pipeline_rank_cost(const Cluster& cluster, const Graph& graph,
                                    const MemoryEstimate& memory, const MemoryLayout& layout) {
  double message = 0;
  for (const CollectiveNode& n : graph.collectives)
    if (n.axis == "pp") message = std::max(message, n.bytes);
  return pipeline_rank_cost(cluster, graph_compute_time(cluster, graph),
                            tp_collectives_seconds(cluster, graph, layout.tp),
                            graph.parameter_tensors, message, memory, layout);
}

PipelineRankCost pipeline_rank_cost(const Cluster& cluster, const ComputeTime& compute,
                                    double tp_seconds, int64_t parameter_tensors, double message,
                                    const MemoryEstimate& memory, const MemoryLayout& layout) {
  // The figures are the rank's whole schedule: every micro-batch already counted once.
  MemoryLayout once = layout;
  once.grad_accum = 1;
  PipelineRankCost c;
  c.time = estimate_step_time(cluster, compute, tp_seconds, parameter_tensors, memory, once);
  c.message = message;
  return c;
}

StepTime combine_pipeline_ranks(const Cluster& cluster, const std::vector<PipelineRankCost>& ranks,
                                const MemoryLayout& layout) {
  const PipelineRank& pr = layout.pipeline;
  TESSEL_CHECK(pr.active() && int(ranks.size()) == pr.ranks, "pipeline step time: ", ranks.size(),
               " rank estimates for ", pr.ranks, " pipeline ranks");
  std::vector<double> busy;
  double message = 0;  // the largest message the traces sent between stages
  for (const PipelineRankCost& r : ranks) {
    busy.push_back((r.time.compute_seconds + r.time.tp_comm_seconds) / double(pr.microbatches));
    message = std::max(message, r.message);
  }
  const size_t critical = size_t(std::max_element(busy.begin(), busy.end()) - busy.begin());
  StepTime s = ranks[critical].time;
  const PipelineTime p = pipeline_time(busy, pr.microbatches, pr.virtual_stages);
  s.bubble_fraction = p.bubble_fraction;
  s.bubble_seconds = std::max(0.0, p.makespan - s.compute_seconds - s.tp_comm_seconds);
  // The fill and the drain each pass one message between every pair of neighbouring ranks; in
  // the steady state the sends overlap the next compute.
  const int per_stage = layout.dp * layout.tp;
  const int pair[2] = {0, per_stage};
  s.pp_comm_seconds = 2.0 * double(pr.ranks - 1) *
                      step_collective_seconds(cluster, Collective::SendRecv, pair, message);
  double optimizer = 0, exposed = 0;
  for (const PipelineRankCost& r : ranks) {
    optimizer = std::max(optimizer, r.time.optimizer_seconds);
    exposed = std::max(exposed, r.time.dp_exposed_seconds);
  }
  s.optimizer_seconds = optimizer;
  s.dp_exposed_seconds = exposed;
  return with_load(cluster, s);
}

StepTime estimate_pipeline_step_time(const Cluster& cluster, const std::vector<Graph>& graphs,
                                     const std::vector<MemoryEstimate>& memories,
                                     const MemoryLayout& layout) {
  const PipelineRank& pr = layout.pipeline;
  TESSEL_CHECK(pr.active() && int(graphs.size()) == pr.ranks && memories.size() == graphs.size(),
               "pipeline step time: ", graphs.size(), " traces and ", memories.size(),
               " memory estimates for ", pr.ranks, " pipeline ranks");
  std::vector<PipelineRankCost> ranks;
  for (size_t r = 0; r < graphs.size(); ++r)
    ranks.push_back(pipeline_rank_cost(cluster, graphs[r], memories[r], layout));
  return combine_pipeline_ranks(cluster, ranks, layout);
}

}  // namespace tessel::plan
