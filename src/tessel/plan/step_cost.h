// SPDX-License-Identifier: Apache-2.0
// The planner's step time for a data-parallel layout: the traced step's compute (plan/
// compute_cost.h) for every micro-batch, the optimizer, and the dp axis's collectives
// (plan/comm_cost.h) with the overlap the runtime has: gradient buckets are reduced as backward
// finishes them, one after another (PyTorch DDP's bucketing, Li et al. VLDB 2020), so only what
// outlasts the backward is exposed; ZeRO-1/2 all-gather the updated parameters after the update;
// ZeRO-3 gathers each unit before its forward and again for its backward, the next one prefetched
// while the current one computes (Rajbhandari et al. 2020). docs/PLANNER.md, "Step time".
#pragma once

#include "tessel/plan/cluster.h"
#include "tessel/plan/compute_cost.h"
#include "tessel/plan/memory_model.h"

namespace tessel::plan {

struct StepTime {
  double compute_seconds = 0;     // forward + backward (+ recompute) of every micro-batch
  double optimizer_seconds = 0;   // AdamW on this rank's elements, and the gradient scaling pass
  double dp_comm_seconds = 0;     // every dp collective, as if nothing overlapped
  double dp_exposed_seconds = 0;  // the part the step waits for
  double total() const { return compute_seconds + optimizer_seconds + dp_exposed_seconds; }
};

// When buckets of `bucket_seconds` (launch order) become ready at the given times and run one
// after another, how long after `end` the last one finishes (0 when all finish before it).
double exposed_after(const std::vector<double>& ready, const std::vector<double>& bucket_seconds,
                     double end);

// `graph` is one micro-batch's trace on one dp rank; `memory` gives the buckets (estimate_memory
// of the same layout). Ranks 0..dp-1 of `cluster` form the dp group.
StepTime estimate_step_time(const Cluster& cluster, const Graph& graph,
                            const MemoryEstimate& memory, const MemoryLayout& layout);

}  // namespace tessel::plan
