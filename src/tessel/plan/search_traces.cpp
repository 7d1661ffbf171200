// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/search_traces.h"

#include <algorithm>

#include "tessel/plan/compute_cost.h"

namespace tessel::plan {

const Graph& Traces::get(const MemoryLayout& m) {
  std::string key = std::to_string(m.micro_batch) + "/" + std::to_string(int(m.recompute)) + ":" +
                    std::to_string(m.recompute_blocks) + "+" +
                    std::to_string(int(m.recompute_rest)) + "/" + std::to_string(m.dp > 1) + "/" +
                    std::to_string(m.dp > 1 && m.zero_stage == 2) + "/" + std::to_string(m.tp) +
                    "/" + std::to_string(m.message_seq) + "/" + m.tp_plan;
  // The runtime's ZeRO-2/3 on meta: its stage, dp size and micro-batches change the step.
  if (m.dp > 1 && m.zero_stage >= 2 && m.dp_transform)
    key += "/zero" + std::to_string(m.zero_stage) + "/" + std::to_string(m.dp) + "/" +
           std::to_string(m.grad_accum);
  if (m.pipeline.active()) {
    key += "/" + m.pipeline.schedule + "/" + std::to_string(m.pipeline.ranks) + "/" +
           std::to_string(m.pipeline.rank) + "/" + std::to_string(m.pipeline.microbatches);
    // The stages' cut (a split of the DP's, or the runtime's balanced one).
    for (const auto& [begin, end] : m.pipeline.stage_layers)
      key += " " + std::to_string(begin) + "-" + std::to_string(end);
  }
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    recent_.splice(recent_.begin(), recent_, it->second.recent);
    return it->second.graph;
  }
  recent_.push_front(key);
  it = graphs_.emplace(key, Entry{trace_for_layout(config_, m), recent_.begin()}).first;
  cached_ops_ += int64_t(it->second.graph.ops.size());
  ++count_;
  // Never the entry just made: it is the one returned.
  while (cached_ops_ > max_ops_ && recent_.size() > 1) {
    auto old = graphs_.find(recent_.back());
    cached_ops_ -= int64_t(old->second.graph.ops.size());
    graphs_.erase(old);
    recent_.pop_back();
  }
  return it->second.graph;
}

const MemoryEstimate& States::get(const MemoryLayout& m) {
  std::string key = std::to_string(m.tp) + "/" + std::to_string(m.message_seq) + "/" +
                    std::to_string(m.dp) + "/" + std::to_string(m.zero_stage) + "/" +
                    std::to_string(m.bucket_bytes) + "/" + std::to_string(bool(m.dp_transform)) +
                    "/" + std::to_string(m.gradients_held) + "/" + m.tp_plan;
  const PipelineRank& pr = m.pipeline;
  if (pr.active()) {
    const int64_t layers = config_.num_layers() + 2;
    key += "/pp";
    for (int s = 0; s < pr.num_stages(); ++s) {
      if (pr.owner(s) != pr.rank) continue;
      const auto [begin, end] = pr.stage_layers[size_t(s)];
      key += " " + std::to_string(begin == 0) + std::to_string(end == layers) +
             std::to_string(end - begin);
    }
    // The head's rank holds a copy of a tied embedding.
    key += "/" + std::to_string(pr.owner(pr.num_stages() - 1) == pr.rank);
  }
  auto it = states_.find(key);
  if (it == states_.end()) it = states_.emplace(key, estimate_state(config_, m)).first;
  return it->second;
}

RankPrediction predict_pipeline_rank(const Cluster& cluster, const models::ModelConfig& config,
                                     const MemoryLayout& layout, const MemoryLayout& first,
                                     bool whole, Traces& traces, StageTraces& stages,
                                     States& states) {
  RankPrediction r;
  if (whole) {
    const Graph& g = traces.get(layout);
    r.memory = with_step(config, layout, states.get(layout), g.step_peak_bytes, g.saved_bytes);
    r.flops = g.phase_total(Phase::Forward).flops + g.phase_total(Phase::Backward).flops;
    r.cost = pipeline_rank_cost(cluster, g, r.memory, first);
    return r;
  }
  const ComposedRank c = compose_pipeline_rank(stages, config, layout);
  r.memory = with_step(config, layout, states.get(layout), c.step_peak_bytes, 0);
  r.flops = c.flops;
  r.cost = pipeline_rank_cost(cluster, c.compute, c.tp_seconds, c.parameter_tensors, c.message,
                              r.memory, first);
  return r;
}

}  // namespace tessel::plan
