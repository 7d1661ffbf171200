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

StepTime estimate_step_time(const Cluster& cluster, const Graph& graph,
                            const MemoryEstimate& memory, const MemoryLayout& layout) {
  const int dp = layout.dp;
  const int stage = dp > 1 ? layout.zero_stage : 0;
  const ComputeTime compute = graph_compute_time(cluster, graph);
  StepTime s;
  s.compute_seconds = compute.total() * double(layout.grad_accum);
  const double psi = double(memory.parameter_count);
  double padded = 0;
  for (const BucketPlan& b : memory.buckets) padded += double(b.padded);
  const double updated = stage >= 1 ? padded / dp : psi;
  // The update and the one pass that scales every gradient (1/accumulation and clipping).
  s.optimizer_seconds =
      adamw_seconds(cluster, updated) + 8 * updated / cluster.device.memory_bandwidth;
  if (dp == 1) return s;

  std::vector<int> ranks(static_cast<size_t>(dp));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto cost = [&](Collective op, double bytes) {
    return collective_cost(cluster, op, ranks, bytes).seconds;
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
  s.dp_exposed_seconds = exposed_after(ready, seconds, backward);
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
  return s;
}

}  // namespace tessel::plan
