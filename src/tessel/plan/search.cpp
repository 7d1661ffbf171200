// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/search.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "tessel/core/error.h"
#include "tessel/plan/compute_cost.h"
#include "tessel/plan/search_offload.h"
#include "tessel/plan/search_recompute.h"
#include "tessel/plan/search_traces.h"
#include "tessel/tensor/default_device.h"

namespace tessel::plan {

namespace {

// V of "interleaved:V" ("interleaved": 2); 1 for the other schedules.
int chunks_per_rank(const std::string& schedule) {
  if (schedule.rfind("interleaved", 0) != 0) return 1;
  const size_t colon = schedule.find(':');
  if (colon == std::string::npos) return 2;
  const std::string v = schedule.substr(colon + 1);
  TESSEL_CHECK(!v.empty() && v.size() <= 4 &&
                   std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                   std::stoi(v) >= 2,
               "schedule '", schedule, "': interleaved:V needs V >= 2 chunks per rank");
  return std::stoi(v);
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::string gib(double bytes) {
  std::ostringstream s;
  s.precision(bytes >= 1e9 ? 4 : 3);
  if (bytes >= double(int64_t(1) << 30)) {
    s << bytes / double(int64_t(1) << 30) << " GiB";
  } else {
    s << bytes / double(1 << 20) << " MiB";
  }
  return s.str();
}

const char* dtype_peak_name(DType d) {
  return d == DType::BF16 ? "bf16" : d == DType::F16 ? "f16" : "f32";
}

// The dtype's peak, or f32's where the description has none (the CPU backend widens 16-bit).
double model_peak(const Cluster& cluster, DType d) {
  const double p = cluster.device.peak_flops[peak_dtype_index(dtype_peak_name(d))];
  return p > 0 ? p : cluster.peak_flops("f32");
}

// Why the search cannot predict `l` with this request: the models' coverage, and the runtime's
// pieces tp and pp need.
std::string coverage(const Layout& l, const SearchRequest& request) {
  std::string why = model_coverage(l);
  if (!why.empty()) return why;
  if (l.tp > 1 && !request.tensor_parallel)
    return "tp > 1: the request has no tensor-parallel transform to trace";
  if (l.pp > 1 && !request.pipeline_rank)
    return "pp > 1: the request has no pipeline stage partition to trace";
  if (l.pp > 1 && l.dp > 1 && l.zero_stage == 3 && !request.data_parallel)
    return "ZeRO-3 with pp > 1: the request has no data-parallel runtime to trace";
  return "";
}

// What a search keeps between layouts.
struct Kept {
  Kept(const models::ModelConfig& config, const Cluster& cluster, int64_t max_ops)
      : traces(config, max_ops), stages(&cluster, config), states(config) {}
  Traces traces;
  StageTraces stages;
  States states;
  OffloadInputs offload_inputs;
};

// One predicted layout; `cluster` already has the launch's devices. Under pp every pipeline
// rank is traced (or composed from its stages) and predicted (as `tessel plan memory --pp`
// does): the memory is the largest rank's, the step time the pipeline's.

PlanResult predict_traced(const models::ModelConfig& config, const Cluster& cluster,
                          const SearchRequest& request, const Layout& l, Kept& kept) {
  PlanResult r;
  r.layout = l;
  // Under pp each rank's trace is read here and not kept: the traces' cache may drop it. A
  // pipeline whose whole schedules are too long to trace is composed from its stages.
  const bool whole = l.pp == 1 || request.compose_above < 0 ||
                     (l.grad_accum + l.pp) * (config.num_layers() + 2) <= request.compose_above;
  r.composed = !whole;
  std::vector<PipelineRankCost> rank_costs;
  std::vector<MemoryEstimate> memories;
  double flops = 0;  // model FLOPs of one rank's step (forward and backward)
  const MemoryLayout first = memory_layout(l, request, 0);
  for (int p = 0; p < l.pp; ++p) {
    const MemoryLayout ml = p == 0 ? first : memory_layout(l, request, p);
    if (l.pp > 1) {
      RankPrediction rank = predict_pipeline_rank(cluster, config, ml, first, whole, kept.traces,
                                                  kept.stages, kept.states);
      memories.push_back(std::move(rank.memory));
      rank_costs.push_back(rank.cost);
      flops += rank.flops;
      continue;
    }
    const Graph& g = kept.traces.get(ml);
    memories.push_back(estimate_memory(config, ml, g));
    r.time = estimate_step_time(cluster, g, memories.back(), ml);
    // One micro-batch's trace.
    flops = (g.phase_total(Phase::Forward).flops + g.phase_total(Phase::Backward).flops) *
            double(l.grad_accum);
  }
  size_t worst = 0;
  for (size_t p = 1; p < memories.size(); ++p)
    if (memories[p].peak() > memories[worst].peak()) worst = p;
  r.memory = memories[worst];
  if (l.pp > 1) {
    for (const MemoryEstimate& m : memories) r.rank_peaks.push_back(m.peak());
    // A pipeline rank's trace covers its whole schedule; the ranks' mean is one rank's share.
    r.time = combine_pipeline_ranks(cluster, rank_costs, first);
    flops /= double(l.pp);
  }
  r.step_seconds = r.time.total();
  r.tokens_per_second = double(request.global_batch) * double(request.seq) / r.step_seconds;
  // Model FLOPs (recomputation left out) against the dtype's peak.
  r.mfu = flops / (r.step_seconds * model_peak(cluster, request.compute_dtype));
  const double memory = double(cluster.device.memory_bytes);
  if (r.memory.peak() > memory) {
    r.status = PlanStatus::OutOfMemory;
    r.reason = "needs " + gib(r.memory.peak()) + " per rank, the device has " + gib(memory);
    offload_layout(config, cluster, request, memories, kept.offload_inputs, r);
  } else {
    r.status = PlanStatus::Ranked;
  }
  // The buckets' parameter lists have served the step model; a search keeps tens of thousands
  // of results (a 175B GPT's over 1,024 GPUs: up to 28k buckets a rank), so they go.
  r.memory.buckets.clear();
  r.memory.buckets.shrink_to_fit();
  return r;
}

SearchRequest resolved(const models::ModelConfig& config, const Cluster& description,
                       SearchRequest request) {
  if (request.devices <= 0) request.devices = description.num_devices();
  if (request.seq <= 0) request.seq = config.max_positions();
  TESSEL_CHECK(request.global_batch >= 1, "plan: the global batch ", request.global_batch,
               " must be >= 1 sequence");
  TESSEL_CHECK(request.seq <= config.max_positions(), "plan: sequence length ", request.seq,
               " exceeds the model's context of ", config.max_positions());
  TESSEL_CHECK(request.offload_nvme_dir.empty() || description.storage.has_value(),
               "plan: ", description.source,
               " has no [storage] table (read_bandwidth, write_bandwidth), which offloading to "
               "NVMe needs to time the disk");
  TESSEL_CHECK(request.offload_chunk_bytes > 0 && request.offload_host_bytes >= 0,
               "plan: offload chunk of ", request.offload_chunk_bytes, " bytes and host tier of ",
               request.offload_host_bytes, " bytes: expected a positive chunk, a host tier >= 0");
  return request;
}

// Alpa's inter-operator DP over a layout's pipeline layers (plan/stage_split.h): the split into
// pp stages of least pipeline time over one micro-batch's traced compute (less the 16-bit casts of
// weights and gradients, which a pipeline makes once a step), on a rank without dp, tp or pp (the
// layers' ratios, which tp and ZeRO scale alike). The layer costs are kept by micro-batch and
// recomputation, the splits also by pp and micro-batches.
class DpSplits {
 public:
  DpSplits(const Cluster& cluster, const SearchRequest& request, Kept& kept,
           const models::CausalLM& meta_model)
      : cluster_(cluster), request_(request), kept_(kept), meta_model_(meta_model) {}

  // The DP's stages for `l` (no memory bound: the layout's own prediction applies it); under
  // interleaved:V its pp * V chunks (stage_split.h).
  StageSplit stages(const Layout& l) {
    StageSplitRequest sr;
    sr.stages = l.pp;
    sr.micro_batches = l.grad_accum;
    sr.chunks_per_rank = chunks_per_rank(l.schedule);
    return split_stages(costs(l), sr);
  }

  // For a pipeline layout (SearchRequest::dp_stages): the DP's stages as the blocks per stage
  // parallel.pipeline_split takes (every chunk in order under interleaving; 0 for a first or last
  // stage that holds only the embedding or the head); "" when they are the runtime's balanced
  // cut or the layers cannot fill the chunks.
  std::string split(const Layout& l) {
    const auto key = std::make_tuple(l.micro_batch, int(l.recompute), l.pp, l.grad_accum,
                                     chunks_per_rank(l.schedule));
    if (auto it = splits_.find(key); it != splits_.end()) return it->second;
    const StageSplit dp = stages(l);
    const PipelineRank balanced =
        request_.pipeline_rank(l.schedule, l.pp, int(l.grad_accum), 0, "", {});
    const int chunks = int(dp.first_layer.size()) - 1;
    bool same = balanced.num_stages() == chunks;
    for (int s = 0; s < chunks && same; ++s)
      same = balanced.stage_layers[size_t(s)].first == dp.first_layer[size_t(s)];
    std::string spec;
    if (dp.feasible && !same)
      for (int s = 0; s < chunks; ++s)
        spec += (s ? "," : "") +
                std::to_string(dp.first_layer[size_t(s) + 1] - dp.first_layer[size_t(s)] -
                               (s == 0 ? 1 : 0) - (s == chunks - 1 ? 1 : 0));
    return splits_[key] = spec;
  }

 private:
  const std::vector<LayerCost>& costs(const Layout& l) {
    const auto key = std::make_pair(l.micro_batch, int(l.recompute));
    auto it = costs_.find(key);
    if (it != costs_.end()) return it->second;
    Layout one = l;
    one.dp = one.tp = one.pp = 1;
    one.sp = false;
    one.zero_stage = 0;
    one.grad_accum = 1;
    one.schedule.clear();
    one.pipeline_split.clear();
    one.recompute_blocks.clear();
    one.recompute_rest.clear();
    one.tp_plan.clear();
    // A pipeline rank casts its stages' weights to 16 bits and their gradients back once a step
    // (one autocast scope spans the schedule), a rank without one once a micro-batch: the casts,
    // traced outside every module, are left out of the per-micro-batch costs, or the embedding
    // and head layers, to which ops outside the blocks are charged, would weigh a whole model's
    // casts.
    Graph g = kept_.traces.get(memory_layout(one, request_));
    std::erase_if(g.ops, [](const OpNode& op) { return op.kernel == "convert" && op.module <= 0; });
    return costs_.emplace(key, traced_layer_costs(cluster_, g, meta_model_, 16)).first->second;
  }

  const Cluster& cluster_;
  const SearchRequest& request_;
  Kept& kept_;
  const models::CausalLM& meta_model_;
  std::map<std::tuple<int64_t, int, int, int64_t, int>, std::string> splits_;
  std::map<std::pair<int64_t, int>, std::vector<LayerCost>> costs_;
};

}  // namespace

std::string Layout::str() const {
  std::string s = "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + (sp ? " sp" : "") +
                  (tp > 1 && !tp_plan.empty() ? " tp_plan=" + tp_plan : "") +
                  " pp=" + std::to_string(pp) + " zero=" + std::to_string(zero_stage) +
                  " recompute=" + recompute_spec() + " micro_batch=" + std::to_string(micro_batch) +
                  " grad_accum=" + std::to_string(grad_accum);
  if (pp > 1) s += " schedule=" + schedule;
  if (pp > 1 && !pipeline_split.empty()) s += " split=" + pipeline_split;
  if (offloaded())
    s += " offload=" + gib(double(offload_device_budget)) + "+" + gib(double(offload_host_budget)) +
         (offload_nvme_dir.empty() ? "" : "+nvme");
  return s;
}

std::vector<std::string> Layout::train_args() const {
  std::vector<std::string> a = {"--dp",  std::to_string(dp),
                                "--tp",  std::to_string(tp),
                                "--pp",  std::to_string(pp),
                                "--set", "parallel.zero_stage=" + std::to_string(zero_stage),
                                "--set", "train.recompute=" + recompute_spec(),
                                "--set", "train.micro_batch=" + std::to_string(micro_batch),
                                "--set", "train.grad_accum=" + std::to_string(grad_accum)};
  if (sp) {
    a.push_back("--set");
    a.push_back("parallel.sequence_parallel=true");
  }
  if (tp > 1 && !tp_plan.empty()) {
    a.push_back("--set");
    a.push_back("parallel.tp_plan=" + tp_plan);
  }
  if (pp > 1) {
    a.push_back("--schedule");
    a.push_back(schedule);
  }
  if (pp > 1 && !pipeline_split.empty()) {
    a.push_back("--set");
    a.push_back("parallel.pipeline_split=" + pipeline_split);
  }
  if (offloaded()) {
    for (std::string set : {"memory.device_budget=" + std::to_string(offload_device_budget),
                            "memory.host_budget=" + std::to_string(offload_host_budget),
                            "memory.chunk_size=" + std::to_string(offload_chunk_bytes)}) {
      a.push_back("--set");
      a.push_back(std::move(set));
    }
    if (!offload_nvme_dir.empty()) {
      a.push_back("--set");
      a.push_back("memory.nvme_dir=" + offload_nvme_dir);
    }
  }
  return a;
}

std::string Layout::recompute_spec() const {
  const std::vector<nn::Recompute> modes =
      rank_recompute.empty() ? std::vector<nn::Recompute>{recompute} : rank_recompute;
  if (recompute_blocks.size() != modes.size()) return nn::recompute_list_name(modes);
  if (recompute_rest.size() != modes.size())
    return nn::recompute_list_name(modes, recompute_blocks);
  return nn::recompute_list_name(modes, recompute_blocks, recompute_rest);
}

std::string model_coverage(const Layout& layout) {
  if (!layout.rank_recompute.empty() && int(layout.rank_recompute.size()) != layout.pp)
    return "recompute " + layout.recompute_spec() + ": " +
           std::to_string(layout.rank_recompute.size()) + " modes for pp " +
           std::to_string(layout.pp) + " (one per pipeline rank)";
  if (!layout.recompute_blocks.empty() &&
      layout.recompute_blocks.size() !=
          (layout.rank_recompute.empty() ? 1 : layout.rank_recompute.size()))
    return "recompute " + layout.recompute_spec() + ": " +
           std::to_string(layout.recompute_blocks.size()) + " block counts for " +
           std::to_string(layout.rank_recompute.empty() ? 1 : layout.rank_recompute.size()) +
           " modes";
  if (!layout.recompute_rest.empty() &&
      layout.recompute_rest.size() != std::max<size_t>(1, layout.recompute_blocks.size()))
    return "recompute " + layout.recompute_spec() + ": " +
           std::to_string(layout.recompute_rest.size()) + " modes of the other blocks for " +
           std::to_string(layout.recompute_blocks.size()) + " block counts";
  if (layout.sp && layout.tp < 2)
    return "sequence parallelism splits the sequence over the tp ranks: it needs tp > 1";
  if (layout.pp > 1 && layout.schedule != "gpipe" && layout.schedule != "1f1b" &&
      layout.schedule.rfind("interleaved", 0) != 0)
    return "schedule '" + layout.schedule + "': the models know gpipe, 1f1b and interleaved[:V]";
  return "";
}

MemoryLayout memory_layout(const Layout& layout, const SearchRequest& request, int pp_rank) {
  MemoryLayout m;
  m.dp = layout.dp;
  m.zero_stage = layout.zero_stage;
  m.micro_batch = layout.micro_batch;
  m.seq = request.seq;
  m.grad_accum = layout.grad_accum;
  m.recompute = layout.recompute_of(pp_rank);
  m.recompute_blocks = layout.recompute_blocks_of(pp_rank);
  m.recompute_rest = layout.recompute_rest_of(pp_rank);
  m.compute_dtype = request.compute_dtype;
  m.bucket_bytes = request.bucket_bytes;
  m.unfused_attention = request.unfused_attention;
  if (layout.tp > 1) {
    TESSEL_CHECK(bool(request.tensor_parallel), "plan: ", layout.str(),
                 " needs the runtime's tensor-parallel transform in the request");
    request.tensor_parallel(m, layout.tp, layout.sp, layout.tp_plan);
  }
  if (layout.pp > 1) {
    TESSEL_CHECK(bool(request.pipeline_rank), "plan: ", layout.str(),
                 " needs the runtime's pipeline stages in the request");
    m.pipeline = request.pipeline_rank(layout.schedule, layout.pp, int(layout.grad_accum), pp_rank,
                                       layout.pipeline_split, m.tp_transform);
  }
  if (request.data_parallel) request.data_parallel(m);
  return m;
}

std::string_view status_name(PlanStatus status) {
  switch (status) {
    case PlanStatus::Ranked:
      return "ranked";
    case PlanStatus::OutOfMemory:
      return "out of memory";
    case PlanStatus::NotModelled:
      return "not modelled";
    case PlanStatus::Invalid:
      return "invalid";
  }
  return "?";
}

std::vector<LayerCost> traced_layer_costs(const Cluster& cluster, const Graph& graph,
                                          const models::CausalLM& model,
                                          double state_bytes_per_param) {
  const int64_t n = model.num_layers();
  const std::vector<std::string> units = model.unit_paths();
  std::vector<LayerCost> layers(size_t(n) + 2);
  // The layer of each module inside a unit: block u is layer u + 1; a unit past the blocks (the
  // final norm) belongs to the head, layer n + 1.
  std::vector<int64_t> unit_layer(graph.modules.size(), -1);
  for (size_t m = 0; m < graph.modules.size(); ++m) {
    const std::string& path = graph.modules[m].path;
    for (size_t u = 0; u < units.size(); ++u)
      if (path == units[u] || path.rfind(units[u] + ".", 0) == 0)
        unit_layer[m] = std::min<int64_t>(int64_t(u) + 1, n + 1);
  }
  // Ops outside every unit: in the forward, before the first block's ops the embedding (layer
  // 0), after them the head; the backward meets them in the opposite order.
  std::vector<int64_t> module_layer = unit_layer;
  bool seen[kNumPhases] = {false, false, false};
  const std::vector<double> hits =
      cache_hit_fractions(graph.ops, double(cluster.device.cache_bytes));
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const OpNode& op = graph.ops[i];
    const int64_t unit = op.module >= 0 ? unit_layer[size_t(op.module)] : -1;
    const size_t phase = size_t(op.phase);
    int64_t layer = unit;
    if (unit >= 1 && unit <= n) seen[phase] = true;
    if (layer < 0) {
      if (op.phase == Phase::Backward) {
        layer = seen[phase] ? 0 : n + 1;
      } else {
        layer = seen[phase] ? n + 1 : 0;
      }
      if (op.phase == Phase::Forward && op.module >= 0 && module_layer[size_t(op.module)] < 0)
        module_layer[size_t(op.module)] = layer;
    }
    layers[size_t(layer)].seconds += op_time(cluster, op, hits[i]).seconds;
  }
  for (size_t m = 0; m < graph.saved_bytes_by_module.size() && m < module_layer.size(); ++m)
    layers[size_t(module_layer[m] >= 0 ? module_layer[m] : n + 1)].activation_bytes +=
        graph.saved_bytes_by_module[m];
  layers[size_t(n) + 1].activation_bytes += graph.saved_bytes_outside;
  for (const auto& [name, p] : model.named_parameters())
    layers[size_t(model.layer_of_parameter(name))].state_bytes +=
        double(p.numel()) * state_bytes_per_param;
  return layers;
}

SearchResult search_plans(const models::ModelConfig& config, const Cluster& description,
                          const SearchRequest& request_in) {
  SearchRequest request = resolved(config, description, request_in);
  const Cluster cluster = description.with_devices(request.devices);

  SearchResult out;
  out.model = config.summary();
  out.devices = request.devices;
  out.device_memory_bytes = double(cluster.device.memory_bytes);
  out.global_batch = request.global_batch;
  out.seq = request.seq;

  Kept kept(config, cluster, request.trace_cache_ops);
  std::shared_ptr<models::CausalLM> meta_model;
  {
    DefaultDeviceScope meta(Device::meta());
    meta_model = config.build_empty();
  }
  // Recomputation modes the model's blocks refuse (a mixture of experts' full recomputation,
  // whose replay would route again) are not searched: one entry each, with the model's reason.
  {
    std::vector<nn::Recompute> accepted;
    for (nn::Recompute mode : request.recompute) {
      try {
        meta_model->set_recompute(mode);
        accepted.push_back(mode);
      } catch (const Error& e) {
        PlanResult r;
        r.layout.recompute = mode;
        r.status = PlanStatus::NotModelled;
        r.reason =
            "recompute " + std::string(nn::recompute_name(mode)) + " is not searched: " + e.what();
        out.pruned.push_back(std::move(r));
      }
    }
    meta_model->set_recompute(nn::Recompute::None);
    TESSEL_CHECK(!accepted.empty(), "plan: ", config.summary(),
                 " accepts none of the recompute modes searched: ",
                 out.pruned.empty() ? std::string() : out.pruned.back().reason);
    request.recompute = accepted;
  }
  DpSplits dp_splits(cluster, request, kept, *meta_model);
  const double memory_bytes = double(cluster.device.memory_bytes);
  const int64_t heads = config.num_heads(), layers = config.num_layers() + 2;
  int factorisations = 0, done = 0;
  for (int64_t dp : divisors(request.devices))
    factorisations += int(divisors(request.devices / dp).size());
  for (int64_t dp : divisors(request.devices)) {
    for (int64_t tp : divisors(request.devices / dp)) {
      const int64_t pp = request.devices / dp / tp;
      const auto report = [&] {
        ++done;
        if (request.progress)
          request.progress(done, factorisations, int(dp), int(tp), int(pp),
                           int64_t(out.ranked.size() + out.pruned.size()));
      };
      Layout base;
      base.dp = int(dp);
      base.tp = int(tp);
      base.pp = int(pp);
      PlanResult invalid;
      invalid.layout = base;
      if (request.global_batch % dp != 0) {
        invalid.reason = "the global batch of " + std::to_string(request.global_batch) +
                         " sequences does not divide over dp " + std::to_string(dp);
      } else if (heads % tp != 0) {
        invalid.reason =
            std::to_string(heads) + " attention heads do not divide over tp " + std::to_string(tp);
      } else if (pp > layers) {
        invalid.reason = "pp " + std::to_string(pp) + " exceeds the model's " +
                         std::to_string(layers) + " pipeline layers";
      }
      if (!invalid.reason.empty()) {
        out.pruned.push_back(std::move(invalid));
        report();
        continue;
      }
      const int64_t rows = request.global_batch / dp;
      std::vector<std::string> schedules;
      for (const std::string& s : pp > 1 ? request.schedules : std::vector<std::string>{""}) {
        if (s != "interleaved") {
          schedules.push_back(s);
          continue;
        }
        // Every number of chunks per rank the layers allow (a stage holds one layer at least).
        for (int64_t v = 2; pp * v <= layers; ++v)
          schedules.push_back("interleaved:" + std::to_string(v));
        if (pp * 2 > layers) {
          PlanResult r;
          r.layout = base;
          r.layout.schedule = s;
          r.reason = "interleaved at pp " + std::to_string(pp) + " needs at least " +
                     std::to_string(2 * pp) +
                     " pipeline layers (two chunks per rank), the model has " +
                     std::to_string(layers);
          out.pruned.push_back(std::move(r));
        }
      }
      // Predicts `l` with each of its stage cuts (the runtime's balanced stages, the DP's, or
      // both) into `out`; false when the runtime refuses its tp plan file, which is then one
      // invalid entry with the runtime's reason.
      std::set<std::string> failed_plans;
      // `balanced_peaks`: the ranks' peaks of the balanced cut's prediction, when there is one;
      // `dp_peaks`: the DP cut's by its split and mode.
      const auto predict = [&](const Layout& l) {
        return predict_traced(config, cluster, request, l, kept);
      };
      const auto predict_cuts = [&](const Layout& l, std::vector<double>* balanced_peaks,
                                    std::map<std::string, PeaksByMode>* dp_peaks) {
        const std::string split =
            l.pp > 1 && request.dp_stages ? dp_splits.split(l) : std::string();
        std::vector<Layout> cuts;
        if (request.balanced_stages || split.empty()) cuts.push_back(l);
        if (!split.empty()) {
          cuts.push_back(l);
          cuts.back().pipeline_split = split;
        }
        for (const Layout& cut : cuts) {
          PlanResult r;
          try {
            r = predict_traced(config, cluster, request, cut, kept);
          } catch (const Error& e) {
            if (cut.tp_plan.empty()) throw;
            r.layout = cut;
            r.status = PlanStatus::Invalid;
            r.reason = "tp plan " + cut.tp_plan + ": " + e.what();
            out.pruned.push_back(std::move(r));
            return false;
          }
          if (balanced_peaks && cut.pipeline_split.empty())
            *balanced_peaks = cut.pp == 1 ? std::vector<double>{r.memory.peak()} : r.rank_peaks;
          if (dp_peaks && !cut.pipeline_split.empty())
            (*dp_peaks)[cut.pipeline_split][cut.recompute] = r.rank_peaks;
          (r.status == PlanStatus::Ranked ? out.ranked : out.pruned).push_back(std::move(r));
        }
        return true;
      };
      for (const std::string& schedule : schedules) {
        Layout sched = base;
        sched.schedule = schedule;
        // Not ranked: one entry per factorisation and schedule. Under pp the DP's stage split is
        // still computed (on one micro-batch's traced compute, no memory bound), for the report.
        std::string why = coverage(sched, request);
        if (!why.empty()) {
          PlanResult r;
          r.layout = sched;
          r.status = PlanStatus::NotModelled;
          r.reason = std::move(why);
          if (pp > 1) {
            // Micro-batches >= pp where the rows allow, as a pipeline wants.
            int64_t mb = 1;
            for (int64_t d : divisors(rows))
              if (rows / d >= pp) mb = d;
            r.layout.micro_batch = mb;
            r.layout.grad_accum = rows / mb;
            r.stages = dp_splits.stages(r.layout);
          }
          out.pruned.push_back(std::move(r));
          continue;
        }
        // ZeRO stages the models do not cover with this factorisation: one entry each.
        std::vector<int> zeros;
        for (int zero : dp > 1 ? request.zero_stages : std::vector<int>{0}) {
          Layout z = sched;
          z.zero_stage = zero;
          std::string excluded = coverage(z, request);
          if (excluded.empty()) {
            zeros.push_back(zero);
            continue;
          }
          PlanResult r;
          r.layout = z;
          r.status = PlanStatus::NotModelled;
          r.reason = std::move(excluded);
          out.pruned.push_back(std::move(r));
        }
        const bool interleaved = schedule.rfind("interleaved", 0) == 0;
        for (int64_t mb : divisors(rows)) {
          if (request.max_micro_batch > 0 && mb > request.max_micro_batch) continue;
          // The interleaved schedule moves micro-batches in groups of pp (the runtime refuses
          // other counts).
          if (interleaved && (rows / mb) % pp != 0) continue;
          for (const std::string& plan : tp > 1 ? request.tp_plans : std::vector<std::string>{""})
            for (bool sp : tp > 1 ? request.sequence_parallel : std::vector<bool>{false})
              if (const auto scope = request.tp_plan_scopes.find(plan);
                  scope == request.tp_plan_scopes.end() ||
                  (scope->second.tp == tp && scope->second.micro_batches.count(mb) &&
                   scope->second.sp == sp))
                for (int zero : zeros) {
                  Layout l = sched;
                  l.tp_plan = plan;
                  l.sp = sp;
                  l.zero_stage = zero;
                  l.micro_batch = mb;
                  l.grad_accum = rows / mb;
                  PeaksByMode peaks;
                  std::map<std::string, PeaksByMode> dp_peaks;
                  for (nn::Recompute rc : request.recompute) {
                    if (failed_plans.count(plan)) continue;
                    l.recompute = rc;
                    if (!predict_cuts(l, &peaks[rc], &dp_peaks)) failed_plans.insert(plan);
                  }
                  if (failed_plans.count(plan)) continue;
                  // Recomputation finer than the layout's one mode, on the balanced cut and on
                  // each of the DP's (whose cut depends on the mode it was found with: every mode
                  // is predicted on it first, where some rank needs recomputation there).
                  const auto finer = [&](const Layout& cut, const PeaksByMode& by_mode) {
                    if (request.block_recompute)
                      for (nn::Recompute rest : {nn::Recompute::None, nn::Recompute::Selective}) {
                        if (rest != nn::Recompute::None && !by_mode.count(rest)) continue;
                        if (std::optional<PlanResult> r = fewest_recomputed_blocks(
                                config, request, cut, by_mode, memory_bytes, predict, rest))
                          (r->status == PlanStatus::Ranked ? out.ranked : out.pruned)
                              .push_back(std::move(*r));
                      }
                    if (pp == 1 || !request.rank_recompute) return;
                    Layout ranks = cut;
                    ranks.rank_recompute = least_recompute_per_rank(by_mode, int(pp), memory_bytes);
                    if (ranks.rank_recompute.empty()) return;
                    PlanResult r = predict_traced(config, cluster, request, ranks, kept);
                    (r.status == PlanStatus::Ranked ? out.ranked : out.pruned)
                        .push_back(std::move(r));
                  };
                  finer(l, peaks);
                  if (!request.block_recompute && !request.rank_recompute) continue;
                  for (auto& [split, by_mode] : dp_peaks) {
                    Layout cut = l;
                    cut.pipeline_split = split;
                    const auto fits = [&](const std::vector<double>& p) {
                      return std::all_of(p.begin(), p.end(),
                                         [&](double b) { return b <= memory_bytes; });
                    };
                    // Every mode on this cut, once some rank needs recomputation on it; each a
                    // layout of its own.
                    bool needs = !by_mode.count(nn::Recompute::None) ||
                                 !fits(by_mode.at(nn::Recompute::None));
                    for (nn::Recompute rc : request.recompute) {
                      if (!needs || by_mode.count(rc)) continue;
                      cut.recompute = rc;
                      PlanResult r = predict_traced(config, cluster, request, cut, kept);
                      by_mode[rc] = r.rank_peaks;
                      if (rc == nn::Recompute::None) needs = !fits(r.rank_peaks);
                      (r.status == PlanStatus::Ranked ? out.ranked : out.pruned)
                          .push_back(std::move(r));
                    }
                    if (needs) finer(cut, by_mode);
                  }
                }
        }
      }
      report();
    }
  }
  out.traces = kept.traces.count();
  out.stage_traces = kept.stages.count();
  // Fastest first; equal times (the models charge some choices nothing) by less memory, then in
  // search order (the lower ZeRO stage, the less recomputation).
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [](const PlanResult& a, const PlanResult& b) {
                     if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
                     return a.memory.peak() < b.memory.peak();
                   });
  return out;
}

PlanResult predict_layout(const models::ModelConfig& config, const Cluster& description,
                          const SearchRequest& request_in, const Layout& layout) {
  const SearchRequest request = resolved(config, description, request_in);
  TESSEL_CHECK(layout.dp * layout.tp * layout.pp == request.devices, "plan: ", layout.str(),
               " needs ", layout.dp * layout.tp * layout.pp, " devices, the request has ",
               request.devices);
  PlanResult r;
  r.layout = layout;
  r.reason = coverage(layout, request);
  if (!r.reason.empty()) {
    r.status = PlanStatus::NotModelled;
    return r;
  }
  const Cluster cluster = description.with_devices(request.devices);
  Kept kept(config, cluster, request.trace_cache_ops);
  return predict_traced(config, cluster, request, layout, kept);
}

const PlanResult& best_plan(const SearchResult& result) {
  if (!result.ranked.empty()) return result.ranked.front();
  const PlanResult* least = nullptr;
  for (const PlanResult& r : result.pruned)
    if (r.status == PlanStatus::OutOfMemory && (!least || r.memory.peak() < least->memory.peak()))
      least = &r;
  if (least) {
    TESSEL_FAIL("plan: ", result.model, " does not fit ", result.devices, " device(s) of ",
                gib(result.device_memory_bytes),
                " in any layout the models predict: the least "
                "it needs is ",
                gib(least->memory.peak()), " (", int64_t(least->memory.peak()),
                " bytes) per rank, with ", least->layout.str(),
                "; use devices with at least that much memory, more devices, or a smaller batch "
                "or sequence");
  }
  std::string why;
  for (const PlanResult& r : result.pruned) why += "\n  " + r.layout.str() + ": " + r.reason;
  TESSEL_FAIL("plan: no layout of ", result.model, " on ", result.devices,
              " device(s) can be predicted:", why);
}

}  // namespace tessel::plan
