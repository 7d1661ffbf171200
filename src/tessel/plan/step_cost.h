// SPDX-License-Identifier: Apache-2.0
// The planner's step time for a data-parallel layout: the traced step's compute (plan/
// compute_cost.h) for every micro-batch, the optimizer, and the dp axis's collectives
// (plan/comm_cost.h) with the overlap the runtime has: gradient buckets are reduced as backward
// finishes them, one after another (PyTorch DDP's bucketing, Li et al. VLDB 2020), so only what
// outlasts the backward is exposed; ZeRO-1/2 all-gather the updated parameters after the update;
// ZeRO-3 gathers each unit before its forward and again for its backward, the next one prefetched
// while the current one computes (Rajbhandari et al. 2020). Tensor parallelism adds the
// collectives the traced step issued (Megatron-LM's all-reduces, or all-gathers and
// reduce-scatters under sequence parallelism), blocking between the ops that need them;
// pipelines add the schedule's bubble (GPipe and 1F1B: (p-1)/(m+p-1) with equal stages;
// interleaved: (p-1)/(vm+p-1); Narayanan et al. 2021) and the messages on its critical path.
// docs/PLANNER.md, "Step time".
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tessel/plan/cluster.h"
#include "tessel/plan/comm_cost.h"
#include "tessel/plan/compute_cost.h"
#include "tessel/plan/memory_model.h"

namespace tessel::plan {

struct StepTime {
  double compute_seconds = 0;     // forward + backward (+ recompute) of every micro-batch
  double overhead_seconds = 0;    // the part of compute_seconds that is ops' overhead
  double optimizer_seconds = 0;   // AdamW on this rank's elements, the norm and scaling passes
  double dp_comm_seconds = 0;     // every dp collective, as if nothing overlapped
  double dp_exposed_seconds = 0;  // the part the step waits for
  double tp_comm_seconds = 0;     // tensor-parallel collectives, none overlapped
  double pp_comm_seconds = 0;     // pipeline messages on the schedule's critical path
  double bubble_seconds = 0;      // the busiest pipeline rank's idle time in the schedule
  double bubble_fraction = 0;     // idle share of all pipeline ranks' time
  // The CPU-bound terms' wait for a core on a machine with more runnable work than cores:
  // (compute + optimizer + bubble) × (1 / device.cpu_share − 1). The communication terms come
  // from wall-clock calibration under the same load and are not stretched again.
  double load_seconds = 0;
  double total() const {
    return compute_seconds + optimizer_seconds + dp_exposed_seconds + tp_comm_seconds +
           pp_comm_seconds + bubble_seconds + load_seconds;
  }
};

// When buckets of `bucket_seconds` (launch order) become ready at the given times and run one
// after another, how long after `end` the last one finishes (0 when all finish before it).
double exposed_after(const std::vector<double>& ready, const std::vector<double>& bucket_seconds,
                     double end);

// `graph` is one micro-batch's trace on one dp rank; `memory` gives the buckets (estimate_memory
// of the same layout). Ranks 0, tp, 2tp, ... of `cluster` form the dp group, 0..tp-1 the tp group
// (the mesh's order, tp fastest).
StepTime estimate_step_time(const Cluster& cluster, const Graph& graph,
                            const MemoryEstimate& memory, const MemoryLayout& layout);
// The same from what the model reads of the graph: its compute (one micro-batch), its
// tensor-parallel collectives' time for the whole step, and its parameter tensors.
StepTime estimate_step_time(const Cluster& cluster, const ComputeTime& compute, double tp_seconds,
                            int64_t parameter_tensors, const MemoryEstimate& memory,
                            const MemoryLayout& layout);

// The graph's collectives on the tp axis timed for ranks 0..tp-1 (0 when tp is 1).
double tp_collectives_seconds(const Cluster& cluster, const Graph& graph, int tp);

// One collective of a step: the calibrated fit t = alpha + beta·bytes (Cluster::collectives) when
// calibration measured this op over a group of this size inside one node — the blocking MPI call
// as the machine runs it, latency included — else the model of plan/comm_cost.h.
double step_collective_seconds(const Cluster& cluster, Collective op, std::span<const int> ranks,
                               double bytes);

// The graph's collectives on `axis` timed for the group of `ranks` world ranks.
double collectives_seconds(const Cluster& cluster, const Graph& graph, const std::string& axis,
                           std::span<const int> ranks);

// A pipeline whose rank r is busy busy[r] seconds per micro-batch (all its chunks), run over m
// micro-batches with v chunks per rank: makespan m·max + (Σ − max)/v, the fill and drain of the
// slowest rank's rhythm by the others' (equal ranks: (m + (p−1)/v)·t).
struct PipelineTime {
  double makespan = 0;
  double bubble_fraction = 0;  // 1 − Σ busy·m / (p · makespan)
};
PipelineTime pipeline_time(const std::vector<double>& busy, int microbatches, int virtual_stages);

// A pipelined step from every pp rank's trace of its whole schedule (graphs[r], memories[r]:
// pipeline rank r's); `layout.pipeline` gives the schedule (any rank's). Pipeline rank r holds
// world ranks r·dp·tp .. (r+1)·dp·tp − 1. The figures are the critical (busiest) rank's.
StepTime estimate_pipeline_step_time(const Cluster& cluster, const std::vector<Graph>& graphs,
                                     const std::vector<MemoryEstimate>& memories,
                                     const MemoryLayout& layout);

// The same in two parts, so that a rank's graph need not outlive its own estimate (the search
// traces hundreds of pipeline ranks): what one rank's trace contributes, and the step from every
// rank's contribution, rank r's at ranks[r].
struct PipelineRankCost {
  StepTime time;       // the rank's whole schedule, as one step of one micro-batch
  double message = 0;  // the largest message it sent between stages
};
PipelineRankCost pipeline_rank_cost(const Cluster& cluster, const Graph& graph,
                                    const MemoryEstimate& memory, const MemoryLayout& layout);
// The same from the rank's whole-schedule compute, tensor-parallel time, parameter tensors and
// largest message, however found (plan/pipeline_compose.h composes them).
PipelineRankCost pipeline_rank_cost(const Cluster& cluster, const ComputeTime& compute,
                                    double tp_seconds, int64_t parameter_tensors, double message,
                                    const MemoryEstimate& memory, const MemoryLayout& layout);
StepTime combine_pipeline_ranks(const Cluster& cluster, const std::vector<PipelineRankCost>& ranks,
                                const MemoryLayout& layout);

}  // namespace tessel::plan
