// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/memory_model.h"

#include <algorithm>
#include <map>

#include "tessel/core/error.h"
#include "tessel/plan/trace.h"
#include "tessel/tensor/default_device.h"

namespace tessel::plan {

namespace {

constexpr double kF32 = 4;  // master weights, gradients and moments are f32 in every layout

double padded_elements(const std::vector<BucketPlan>& buckets) {
  double n = 0;
  for (const BucketPlan& b : buckets) n += double(b.padded);
  return n;
}

// ZeRO-3's gathering units as Zero3Parameters makes them: one per parameter outside every unit
// path (GPT-2's embeddings), then one per unit path; each unit is one bucket, in reverse order.
std::vector<BucketPlan> zero3_buckets(const models::CausalLM& model,
                                      const std::vector<std::pair<std::string, int64_t>>& params,
                                      int dp) {
  const std::vector<std::string> paths = model.unit_paths();
  auto unit_of = [&](const std::string& name) -> int {
    for (size_t u = 0; u < paths.size(); ++u)
      if (name.rfind(paths[u] + ".", 0) == 0) return int(u);
    return -1;
  };
  std::vector<BucketPlan> units;
  for (const auto& [name, numel] : params)
    if (unit_of(name) < 0) units.push_back({{name}, numel, 0});
  const size_t first_path_unit = units.size();
  units.resize(first_path_unit + paths.size());
  for (const auto& [name, numel] : params) {
    const int u = unit_of(name);
    if (u < 0) continue;
    BucketPlan& b = units[first_path_unit + size_t(u)];
    b.params.push_back(name);
    b.numel += numel;
  }
  std::vector<BucketPlan> out;
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    if (it->numel == 0) continue;
    it->padded = (it->numel + dp - 1) / dp * dp;
    out.push_back(*it);
  }
  return out;
}

// ZeRO-2/3 traced by the runtime's own code (MemoryLayout::dp_transform).
bool runs_zero(const MemoryLayout& layout) {
  return layout.dp > 1 && layout.zero_stage >= 2 && bool(layout.dp_transform);
}

}  // namespace

std::vector<BucketPlan> plan_buckets(const std::vector<std::pair<std::string, int64_t>>& params,
                                     int dp, int64_t bucket_bytes, bool padded) {
  TESSEL_CHECK(dp >= 1 && bucket_bytes > 0, "plan_buckets: dp ", dp, " and bucket_bytes ",
               bucket_bytes, " must be positive");
  std::vector<BucketPlan> buckets;
  int64_t current = 0;
  for (size_t i = params.size(); i-- > 0;) {
    const int64_t nbytes = params[i].second * int64_t(kF32);
    if (buckets.empty() || (current > 0 && current + nbytes > bucket_bytes)) {
      buckets.emplace_back();
      current = 0;
    }
    buckets.back().params.push_back(params[i].first);
    buckets.back().numel += params[i].second;
    current += nbytes;
  }
  for (BucketPlan& b : buckets) b.padded = padded ? (b.numel + dp - 1) / dp * dp : b.numel;
  return buckets;
}

double korthikanti_layer_bytes(int64_t s, int64_t b, int64_t h, int64_t a, nn::Recompute mode) {
  const double sbh = double(s) * double(b) * double(h);
  switch (mode) {
    case nn::Recompute::None:
      return sbh * (34.0 + 5.0 * double(a) * double(s) / double(h));
    case nn::Recompute::Selective:
      return sbh * 34.0;
    case nn::Recompute::Full:
      return 2.0 * sbh;
  }
  return 0;
}

TraceOptions trace_options(const models::ModelConfig& config, const MemoryLayout& layout) {
  TraceOptions options;
  options.batch = layout.micro_batch;
  options.seq = layout.seq;
  options.recompute = layout.recompute;
  options.recompute_blocks = layout.recompute_blocks;
  options.recompute_rest = layout.recompute_rest;
  options.compute_dtype = layout.compute_dtype;
  // In the buckets, or in ZeRO-2/3's full buffers; or in offload's chunks.
  options.gradients_held = layout.dp > 1 || layout.gradients_held;
  options.transform = layout.tp_transform;
  options.loss = layout.tp_loss;
  options.message_seq = layout.message_seq;
  options.unfused_attention = layout.unfused_attention;
  // A pipeline rank's trace replays every micro-batch itself.
  options.micro_batches = layout.pipeline.active() ? 1 : layout.grad_accum;
  if (runs_zero(layout)) {
    options.data_parallel = layout.dp_transform;
  } else if (layout.dp > 1 && layout.zero_stage == 2) {
    // The full (padded) bucket buffers live from the backward's first gradient to the sync.
    const MemoryEstimate state = estimate_state(config, layout);
    options.first_gradient_bytes = state.gradient_buffer_bytes;
  }
  return options;
}

Graph trace_for_layout(const models::ModelConfig& config, const MemoryLayout& layout) {
  const TraceOptions options = trace_options(config, layout);
  return layout.pipeline.active() ? trace_pipeline_rank(config, options, layout.pipeline)
                                  : trace_training_step(config, options);
}

MemoryEstimate estimate_memory(const models::ModelConfig& config, const MemoryLayout& layout) {
  return estimate_memory(config, layout, trace_for_layout(config, layout));
}

MemoryEstimate estimate_state(const models::ModelConfig& config, const MemoryLayout& layout) {
  TESSEL_CHECK(layout.dp >= 1, "memory model: dp ", layout.dp, " must be >= 1");
  TESSEL_CHECK(layout.zero_stage >= 0 && layout.zero_stage <= 3, "memory model: ZeRO stage ",
               layout.zero_stage, " is not one of 0, 1, 2, 3");
  TESSEL_CHECK(layout.micro_batch >= 1 && layout.grad_accum >= 1, "memory model: micro_batch ",
               layout.micro_batch, " and grad_accum ", layout.grad_accum, " must be >= 1");
  const int dp = layout.dp;
  // ZeRO partitions over the dp ranks; with one rank the trainer runs the plain optimizer.
  const int stage = dp > 1 ? layout.zero_stage : 0;
  TESSEL_CHECK(layout.tp == 1 || layout.tp_transform, "memory model: tp ", layout.tp,
               " needs the runtime's tensor-parallel transform (MemoryLayout::tp_transform)");
  TESSEL_CHECK(!layout.pipeline.active() || stage < 3 || layout.dp_transform,
               "memory model: ZeRO-3 with pp ", layout.pipeline.ranks,
               " needs the runtime's data parallelism (MemoryLayout::dp_transform)");

  std::vector<std::pair<std::string, int64_t>> params;
  std::shared_ptr<models::CausalLM> model;
  double tied_copy = 0;  // a pipeline's last rank: the tied embedding it multiplies with
  {
    DefaultDeviceScope meta(Device::meta());
    model = config.build_empty();
    if (layout.tp_transform) layout.tp_transform(*model);
    if (layout.pipeline.active()) {
      // A pipeline rank trains (and keeps moments of) its stages' parameters only.
      std::map<std::string, int64_t> numel;
      for (const auto& [name, p] : model->named_parameters()) numel[name] = p.numel();
      const std::vector<std::string> own = pipeline_rank_parameters(*model, layout.pipeline, false);
      for (const std::string& name : own) params.emplace_back(name, numel.at(name));
      for (const std::string& name : pipeline_rank_parameters(*model, layout.pipeline, true))
        if (std::find(own.begin(), own.end(), name) == own.end())
          tied_copy += kF32 * double(numel.at(name));
    } else {
      for (const auto& [name, p] : model->named_parameters()) params.emplace_back(name, p.numel());
    }
  }

  MemoryEstimate m;
  for (const auto& [name, numel] : params) m.parameter_count += numel;
  const double psi = double(m.parameter_count);

  if (stage == 3) {
    m.buckets = zero3_buckets(*model, params, dp);
  } else if (dp > 1) {
    m.buckets = plan_buckets(params, dp, layout.bucket_bytes, stage >= 2);
  }
  const double padded = padded_elements(m.buckets);
  // All-gather staging: the largest padded bucket of several parameters (a bucket of one
  // parameter is gathered straight into it); stage 3 gathers into the units' own buffers.
  double staging = 0;
  if (stage == 1 || stage == 2)
    for (const BucketPlan& b : m.buckets)
      if (b.params.size() > 1)
        staging = std::max(staging, kF32 * double((b.numel + dp - 1) / dp * dp));

  switch (stage) {
    case 0:
      m.param_bytes = kF32 * psi;
      m.grad_bytes = dp > 1 ? kF32 * psi : 0;  // dp: the buckets; one rank: made in backward
      m.optimizer_bytes = 2 * kF32 * psi;
      break;
    case 1:
      m.param_bytes = kF32 * psi;
      m.grad_bytes = kF32 * psi;
      m.optimizer_bytes = 2 * kF32 * padded / dp;
      m.comm_bytes = staging;
      break;
    case 2:
      m.param_bytes = kF32 * psi;
      m.grad_bytes = kF32 * padded / dp;
      m.optimizer_bytes = 2 * kF32 * padded / dp;
      m.comm_bytes = staging;
      m.gradient_buffer_bytes = kF32 * padded;  // the full buffers until their reduction
      break;
    case 3: {
      m.param_bytes = kF32 * padded / dp;
      m.grad_bytes = kF32 * padded / dp;
      m.optimizer_bytes = 2 * kF32 * padded / dp;
      // At the start of backward (the step's peak): the units outside the blocks (embeddings,
      // final norm) and the last block gathered, and the gradient buffer of the largest unit
      // outside the blocks (the tied embedding, whose gradient the head makes first and which
      // is reduced last). The prefetch of the next block is asynchronous: measured peaks vary by
      // a few per cent from run to run (docs/PLANNER.md, "Memory model").
      double outside = 0, largest_outside = 0, largest_block = 0;
      for (const BucketPlan& b : m.buckets) {
        const double bytes = kF32 * double(b.padded);
        if (b.params.size() > 1) {
          largest_block = std::max(largest_block, bytes);
        } else {
          outside += bytes;
          largest_outside = std::max(largest_outside, bytes);
        }
      }
      m.gathered_bytes = outside + largest_block;
      m.gradient_buffer_bytes = largest_outside;
      if (runs_zero(layout)) m.gathered_bytes = m.gradient_buffer_bytes = 0;  // in the trace
      break;
    }
  }
  m.param_bytes += tied_copy;
  return m;
}

MemoryEstimate estimate_memory(const models::ModelConfig& config, const MemoryLayout& layout,
                               const Graph& g) {
  return estimate_memory(config, layout, g.step_peak_bytes, g.saved_bytes);
}

MemoryEstimate estimate_memory(const models::ModelConfig& config, const MemoryLayout& layout,
                               double step_peak_bytes, double saved_bytes) {
  return with_step(config, layout, estimate_state(config, layout), step_peak_bytes, saved_bytes);
}

MemoryEstimate with_step(const models::ModelConfig& config, const MemoryLayout& layout,
                         MemoryEstimate m, double step_peak_bytes, double saved_bytes) {
  m.traced_step_bytes = step_peak_bytes;
  if (layout.dp > 1 && layout.zero_stage == 2) {
    // trace_for_layout allocated them at the first gradient: inside the traced peak.
    m.traced_gradient_buffer_bytes = m.gradient_buffer_bytes;
    m.gradient_buffer_bytes = 0;
  }
  m.saved_activation_bytes = saved_bytes;
  const int64_t seq = layout.seq > 0 ? layout.seq : config.max_positions();
  // Under `mode:N+rest` N blocks keep the mode's bytes and the others the rest's.
  const auto layer = [&](nn::Recompute mode) {
    return korthikanti_layer_bytes(seq, layout.micro_batch, config.hidden_size(),
                                   config.num_heads(), mode);
  };
  const double blocks = double(config.num_layers());
  const double recomputed = layout.recompute_blocks == nn::kAllBlocks
                                ? blocks
                                : std::min(blocks, double(layout.recompute_blocks));
  m.korthikanti_bytes = recomputed * layer(layout.recompute) +
                        (blocks - recomputed) * layer(layout.recompute_blocks == nn::kAllBlocks
                                                          ? nn::Recompute::None
                                                          : layout.recompute_rest);
  return m;
}

}  // namespace tessel::plan
