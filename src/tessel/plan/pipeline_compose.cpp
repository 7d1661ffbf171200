// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/pipeline_compose.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/nn/autocast.h"
#include "tessel/plan/step_cost.h"
#include "tessel/plan/trace.h"
#include "tessel/plan/trace_recorder.h"
#include "tessel/tensor/default_device.h"
#include "tessel/tensor/meta_allocator.h"

namespace tessel::plan {

namespace {

double storage_bytes(const Tensor& t) {
  return t.defined() ? double(t.storage().nbytes()) : 0.0;
}

// The ops and collectives recorded in [from, to) of `graph`, as a graph of their own.
Graph part(const Graph& graph, std::pair<size_t, size_t> ops, std::pair<size_t, size_t> calls) {
  Graph g;
  g.ops.assign(graph.ops.begin() + std::ptrdiff_t(ops.first),
               graph.ops.begin() + std::ptrdiff_t(ops.second));
  g.collectives.assign(graph.collectives.begin() + std::ptrdiff_t(calls.first),
                       graph.collectives.begin() + std::ptrdiff_t(calls.second));
  return g;
}

void add(ComputeTime& to, const ComputeTime& from, double times) {
  for (size_t p = 0; p < to.seconds.size(); ++p) to.seconds[p] += times * from.seconds[p];
  to.gemm_seconds += times * from.gemm_seconds;
  to.other_seconds += times * from.other_seconds;
  to.overhead_seconds += times * from.overhead_seconds;
  for (const auto& [kernel, t] : from.kernel_seconds) to.kernel_seconds[kernel] += times * t;
}

double message_bytes(const models::ModelConfig& config, const MemoryLayout& layout) {
  const int64_t seq = layout.seq > 0 ? layout.seq : config.max_positions();
  const int64_t tokens = layout.message_seq > 0 ? layout.message_seq : seq;
  return double(layout.micro_batch) * double(tokens) * double(config.hidden_size()) *
         double(dtype_size(layout.compute_dtype));
}

}  // namespace

StageTrace trace_stage(const Cluster* cluster, const models::ModelConfig& config,
                       const MemoryLayout& layout, int64_t begin, int64_t end) {
  const TraceOptions options = trace_options(config, layout);
  const int64_t seq = options.seq > 0 ? options.seq : config.max_positions();
  DefaultDeviceScope meta(Device::meta());
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  if (options.transform) options.transform(*model);
  models::set_rank_recompute(*model, options.recompute, options.recompute_blocks,
                             blocks_of_layers(model->num_layers(), begin, end),
                             options.recompute_rest);
  model->train(options.dropout);
  const int64_t blocks = model->num_layers();
  TESSEL_CHECK(begin >= 0 && begin < end && end <= blocks + 2, "stage trace: layers [", begin, ", ",
               end, ") of a model of ", blocks + 2, " pipeline layers");
  const bool first = begin == 0, last = end == blocks + 2;

  // As a pipeline rank holding this stage: its parameters and, with the head, the tied ones.
  StageTrace out;
  const std::vector<std::string> tied = model->head_tied_parameters();
  std::vector<std::string> trained, held;
  // ZeRO-3's units as the trainer forms them: one per block, one per parameter outside them.
  std::map<int64_t, double> block_bytes;
  for (const auto& [name, p] : model->named_parameters()) {
    const int64_t layer = model->layer_of_parameter(name);
    const bool own = layer >= begin && layer < end;
    const bool is_tied = std::find(tied.begin(), tied.end(), name) != tied.end();
    if (first && is_tied) out.tied_bytes += storage_bytes(p);
    if (own) {
      trained.push_back(name);
      out.trained.emplace_back(name, p.numel());
      if (layer >= 1 && layer <= blocks)
        block_bytes[layer] += storage_bytes(p);
      else
        out.largest_unit_bytes = std::max(out.largest_unit_bytes, storage_bytes(p));
    }
    if (own || (last && is_tied)) held.push_back(name);
  }
  out.parameter_tensors = int64_t(held.size());
  const std::vector<nn::Module*> roots = parameter_holders(*model, held);
  for (const auto& [layer, bytes] : block_bytes)
    out.largest_unit_bytes = std::max(out.largest_unit_bytes, bytes);
  DataParallelRun dp = start_data_parallel(*model, options, trained);

  Graph graph;
  Recorder recorder(graph, options.half_stand_ins, options.unfused_attention);
  const Shape message_shape{options.batch, options.message_seq > 0 ? options.message_seq : seq,
                            config.hidden_size()};
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int i = 0; i < 2; ++i)
    batches.emplace_back(empty({options.batch, seq}, DType::I64),
                         empty({options.batch, seq}, DType::I64));
  struct Slot {
    Tensor input, output, grad_output;
  };
  Slot slots[2];
  // Actions 0, 1: the forwards of micro-batches 0 and 1; 2, 3: their backwards; 4: the finish;
  // 5: the start (the autocast scope's copies).
  std::pair<size_t, size_t> ops[6], calls[6];
  const auto measure = [&](int action, const auto& body) {
    const double start = double(meta_allocator().bytes_in_use());
    meta_allocator().reset_peak();
    recorder.reset_kernel_peak();
    ops[action].first = graph.ops.size();
    calls[action].first = graph.collectives.size();
    body();
    ops[action].second = graph.ops.size();
    calls[action].second = graph.collectives.size();
    ActionBytes b;
    b.peak = std::max(double(meta_allocator().peak_bytes()), recorder.kernel_peak()) - start;
    b.delta = double(meta_allocator().bytes_in_use()) - start;
    return b;
  };
  const auto forward = [&](int mb) {
    recorder.set_backward(false);
    Slot& s = slots[mb];
    s.output = stage_forward(*model, options, begin, end, batches[size_t(mb)].first,
                             batches[size_t(mb)].second, s.input);
  };
  // As the executor: after the backward the slot lets go of the output and its gradient.
  const auto backward = [&](int mb) {
    recorder.set_backward(true);
    Slot& s = slots[mb];
    stage_backward(s.output, last ? Tensor() : s.grad_output);
    s.output = Tensor();
    s.grad_output = Tensor();
  };
  {
    kernels::KernelObserverScope observe(recorder);
    dist::MetaCallObserverScope observe_calls(recorder.collective_observer());
    std::optional<nn::LowPrecisionScope> autocast;
    out.start = measure(5, [&] {
      if (dp.before_backward) dp.before_backward(false);
      if (options.compute_dtype != DType::F32) {
        autocast.emplace(roots, options.compute_dtype, dp.defer);
        if (dp.set_low_precision) dp.set_low_precision(&*autocast);
      }
    });
    // The received messages exist before the computes that read them (posted ahead).
    for (Slot& s : slots)
      if (!first) s.input = empty(message_shape, options.compute_dtype).set_requires_grad(true);
    out.forward_first = measure(0, [&] { forward(0); });
    out.forward_later = measure(1, [&] { forward(1); });
    out.output_bytes = storage_bytes(slots[1].output);
    for (Slot& s : slots)
      if (!last) s.grad_output = empty(message_shape, options.compute_dtype);
    out.backward_first = measure(2, [&] { backward(0); });
    out.backward_later = measure(3, [&] { backward(1); });
    if (!first) out.input_grad_bytes = storage_bytes(slots[1].input.grad());
    for (Slot& s : slots) s = Slot();
    const double before = double(meta_allocator().bytes_in_use());
    if (autocast && dp.set_low_precision) dp.set_low_precision(nullptr);
    autocast.reset();
    out.released_at_end = before - double(meta_allocator().bytes_in_use());
    // The axes' finish (the gradient sync, ZeRO-3's release), whose buffers the step's peak
    // counts.
    out.finish = measure(4, [&] {
      if (dp.after_backward) dp.after_backward();
      if (dp.finish) dp.finish();
    });
  }

  const Graph first_mb = part(graph, ops[0], calls[0]);
  const Graph first_back = part(graph, ops[2], calls[2]);
  const Graph later_mb = part(graph, ops[1], calls[1]);
  const Graph later_back = part(graph, ops[3], calls[3]);
  const auto cost = [&](const Graph& f, const Graph& b, ComputeTime& compute, double& tp,
                        double& flops) {
    compute = graph_compute_time(*cluster, f);
    add(compute, graph_compute_time(*cluster, b), 1.0);
    tp = tp_collectives_seconds(*cluster, f, layout.tp) +
         tp_collectives_seconds(*cluster, b, layout.tp);
    for (const Graph* g : {&f, &b})
      flops += g->phase_total(Phase::Forward).flops + g->phase_total(Phase::Backward).flops;
  };
  if (cluster) {
    out.compute_start = graph_compute_time(*cluster, part(graph, ops[5], calls[5]));
    cost(first_mb, first_back, out.compute_first, out.tp_seconds_first, out.flops_first);
    cost(later_mb, later_back, out.compute_later, out.tp_seconds_later, out.flops_later);
  }
  return out;
}

StageTraces::StageTraces(const Cluster* cluster, const models::ModelConfig& config)
    : cluster_(cluster), config_(config) {}

const StageTrace& StageTraces::get(const MemoryLayout& m, int64_t begin, int64_t end) {
  const int64_t layers = config_.num_layers() + 2;
  std::string key = std::to_string(m.micro_batch) + "/" + std::to_string(m.seq) + "/" +
                    std::to_string(int(m.recompute)) + ":" + std::to_string(m.recompute_blocks) +
                    "+" + std::to_string(int(m.recompute_rest)) + "/" +
                    std::string(dtype_name(m.compute_dtype)) + "/" + std::to_string(m.tp) + "/" +
                    std::to_string(m.message_seq) + "/" +
                    std::to_string(m.dp > 1 || m.gradients_held) + "/" + m.tp_plan;
  if (m.dp > 1 && m.zero_stage >= 2 && m.dp_transform)
    key += "/zero" + std::to_string(m.zero_stage) + "/" + std::to_string(m.dp);
  key += "/" + std::to_string(begin == 0) + std::to_string(end == layers) + "/" +
         std::to_string(end - begin);
  auto it = traces_.find(key);
  if (it == traces_.end())
    it = traces_.emplace(key, trace_stage(cluster_, config_, m, begin, end)).first;
  return it->second;
}

ComposedRank compose_pipeline_rank(StageTraces& stages, const models::ModelConfig& config,
                                   const MemoryLayout& layout) {
  const PipelineRank& pr = layout.pipeline;
  TESSEL_CHECK(pr.active() && pr.rank >= 0 && pr.rank < pr.ranks, "pipeline composition: rank ",
               pr.rank, " of ", pr.ranks, " pipeline ranks");
  const int last_stage = pr.num_stages() - 1;
  const double m = double(pr.microbatches);
  ComposedRank out;
  std::vector<const StageTrace*> trace(size_t(pr.num_stages()), nullptr);
  double released_at_end = 0, finish_peak = 0, tied = 0, largest_unit = 0;
  // `mode:N+rest` over the rank's blocks: each stage recomputes its share of the first N, in
  // order, with `mode`, and its other blocks with `rest`.
  int64_t recompute_left = layout.recompute_blocks;
  for (int s = 0; s <= last_stage; ++s) {
    if (pr.owner(s) != pr.rank) continue;
    const auto [begin, end] = pr.stage_layers[size_t(s)];
    MemoryLayout stage_layout = layout;
    if (recompute_left != nn::kAllBlocks) {
      const int64_t blocks = int64_t(blocks_of_layers(config.num_layers(), begin, end).size());
      const int64_t n = std::min(blocks, recompute_left);
      recompute_left -= n;
      // The same trace as a stage without the count, or with the rest's mode on every block.
      stage_layout.recompute_blocks = n == blocks || n == 0 ? nn::kAllBlocks : n;
      if (n == 0) stage_layout.recompute = layout.recompute_rest;
      if (n == 0 || n == blocks) stage_layout.recompute_rest = nn::Recompute::None;
    }
    const StageTrace& t = stages.get(stage_layout, begin, end);
    trace[size_t(s)] = &t;
    add(out.compute, t.compute_start, 1.0);
    add(out.compute, t.compute_first, 1.0);
    add(out.compute, t.compute_later, m - 1);
    out.tp_seconds += t.tp_seconds_first + (m - 1) * t.tp_seconds_later;
    out.flops += t.flops_first + (m - 1) * t.flops_later;
    out.parameter_tensors += t.parameter_tensors;
    released_at_end += t.released_at_end;
    finish_peak = std::max(finish_peak, t.finish.peak);
    largest_unit = std::max(largest_unit, t.largest_unit_bytes);
    if (s == 0 && pr.owner(last_stage) != pr.rank) tied = t.tied_bytes;
  }
  TESSEL_CHECK(recompute_left == nn::kAllBlocks || recompute_left == 0, "recompute ",
               nn::recompute_name(layout.recompute), ":", layout.recompute_blocks,
               " names more blocks than pipeline rank ", pr.rank, " runs");
  const double message = message_bytes(config, layout);

  // The bytes live, by handles that give theirs back when the last holder lets go, as tensors
  // share a storage (a send's payload is its slot's output or input gradient).
  struct Pool {
    double live = 0, peak = 0;
  } pool;
  struct Held {
    Held(Pool* p, double n) : pool(p), bytes(n) {}
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    ~Held() { pool->live -= bytes; }
    Pool* pool;
    double bytes;
  };
  using Bytes = std::shared_ptr<Held>;
  const auto hold = [&pool](double bytes) {
    pool.live += bytes;
    pool.peak = std::max(pool.peak, pool.live);
    return std::make_shared<Held>(&pool, bytes);
  };
  const auto reach = [&pool](double above) { pool.peak = std::max(pool.peak, pool.live + above); };

  const int64_t seq = layout.seq > 0 ? layout.seq : config.max_positions();
  // Every micro-batch's ids and targets, loaded before the schedule.
  const Bytes batches = hold(m * 2.0 * double(layout.micro_batch) * double(seq) * 8.0);
  struct Slot {
    Bytes input, output, saved, grad_output, input_grad;
  };
  std::map<std::pair<int, int>, Slot> slots;
  std::vector<Bytes> kept;  // the start's copies, first uses' gradients: to the schedule's end
  for (const StageTrace* t : trace) {
    if (!t) continue;
    reach(t->start.peak);
    kept.push_back(hold(t->start.delta));
  }
  std::vector<Bytes> sends;
  std::vector<bool> forwarded(size_t(pr.num_stages()), false), backwarded = forwarded;
  const std::vector<PipelineAction>& list = pr.actions;
  const auto is_compute = [](PipelineActionKind k) {
    return k == PipelineActionKind::Forward || k == PipelineActionKind::Backward;
  };
  std::vector<Bytes> posted(list.size());
  size_t posted_upto = 0;
  const auto post_ahead = [&](size_t from) {
    size_t stop = from;
    while (stop < list.size() && !is_compute(list[stop].kind)) ++stop;
    stop = std::min(stop + 1, list.size());
    for (; posted_upto < stop; ++posted_upto)
      if (list[posted_upto].kind == PipelineActionKind::RecvActivation ||
          list[posted_upto].kind == PipelineActionKind::RecvGradient)
        posted[posted_upto] = hold(message);
  };
  post_ahead(0);
  for (size_t i = 0; i < list.size(); ++i) {
    const PipelineAction& a = list[i];
    switch (a.kind) {
      case PipelineActionKind::Forward: {
        post_ahead(i + 1);
        const StageTrace& t = *trace[size_t(a.stage)];
        const bool once = !forwarded[size_t(a.stage)];
        forwarded[size_t(a.stage)] = true;
        reach((once ? t.forward_first : t.forward_later).peak);
        Slot& s = slots[{a.stage, a.microbatch}];
        const double saved = std::min(t.forward_first.delta, t.forward_later.delta);
        if (once) kept.push_back(hold(t.forward_first.delta - saved));
        s.saved = hold(saved - t.output_bytes);
        s.output = hold(t.output_bytes);
        break;
      }
      case PipelineActionKind::Backward: {
        post_ahead(i + 1);
        const StageTrace& t = *trace[size_t(a.stage)];
        const bool once = !backwarded[size_t(a.stage)];
        backwarded[size_t(a.stage)] = true;
        const ActionBytes& b = once ? t.backward_first : t.backward_later;
        reach(b.peak);
        Slot& s = slots[{a.stage, a.microbatch}];
        // The trace's delta counts the saved tensors, the output and the output's gradient let
        // go and the input's gradient made; the rest stays to the end (gradients made).
        const double freed = std::min(t.forward_first.delta, t.forward_later.delta) +
                             (a.stage != last_stage ? message : 0.0);
        s.saved.reset();
        s.output.reset();
        s.grad_output.reset();
        if (a.stage != 0) s.input_grad = hold(t.input_grad_bytes);
        if (once) kept.push_back(hold(b.delta + freed - t.input_grad_bytes));
        if (a.stage == 0) s.input.reset();
        break;
      }
      case PipelineActionKind::SendActivation:
        sends.push_back(slots[{a.stage, a.microbatch}].output);
        break;
      case PipelineActionKind::SendGradient: {
        Slot& s = slots[{a.stage, a.microbatch}];
        sends.push_back(s.input_grad);
        s.input.reset();
        s.input_grad.reset();
        break;
      }
      case PipelineActionKind::RecvActivation:
      case PipelineActionKind::RecvGradient: {
        post_ahead(i);
        TESSEL_CHECK(bool(posted[i]), "pipeline composition: receive ", i, " was not posted");
        Bytes buffer = std::move(posted[i]);
        if (a.kind == PipelineActionKind::RecvActivation)
          slots[{a.stage + 1, a.microbatch}].input = std::move(buffer);
        else
          slots[{a.stage - 1, a.microbatch}].grad_output = std::move(buffer);
        break;
      }
    }
    if (is_compute(a.kind)) sends.clear();
  }
  bool sends_any = false;
  for (const PipelineAction& a : list)
    sends_any = sends_any || a.kind == PipelineActionKind::SendActivation ||
                a.kind == PipelineActionKind::SendGradient;
  out.message = sends_any ? message : 0;
  sends.clear();
  slots.clear();
  const double after_schedule = pool.live - released_at_end;
  out.step_peak_bytes = std::max({pool.peak, after_schedule + finish_peak, after_schedule + tied});
  // ZeRO-3 gathers a unit ahead of its use (the prefetch), and the runtime keeps the one its
  // next action starts with across the actions' boundaries, which the stages' traces, each
  // alone, do not see: one of the rank's largest units per stage it holds, and one more, on top
  // bound what that holds (docs/PLANNER.md, "The search at scale").
  // ZeRO-2's runtime allocates a bucket's full gradient buffer at the first gradient any of its
  // parameters gets; a bucket that spans two of the rank's stages is then allocated when the
  // first of them runs its backward, which each stage's trace alone does not see: the largest
  // such bucket on top.
  if (layout.dp > 1 && layout.zero_stage == 2 && layout.dp_transform) {
    std::vector<std::pair<std::string, int64_t>> params;
    std::map<std::string, int> stage_of;
    for (int s = 0; s <= last_stage; ++s) {
      if (!trace[size_t(s)]) continue;
      for (const auto& p : trace[size_t(s)]->trained) {
        params.push_back(p);
        stage_of[p.first] = s;
      }
    }
    double spanning = 0;
    for (const BucketPlan& b : plan_buckets(params, layout.dp, layout.bucket_bytes, true)) {
      bool spans = false;
      for (const std::string& name : b.params)
        spans = spans || stage_of.at(name) != stage_of.at(b.params.front());
      if (spans) spanning = std::max(spanning, 4.0 * double(b.padded));
    }
    out.step_peak_bytes += spanning;
  }
  if (layout.dp > 1 && layout.zero_stage == 3 && layout.dp_transform) {
    const double held = double(std::count_if(trace.begin(), trace.end(),
                                             [](const StageTrace* t) { return t != nullptr; }));
    out.step_peak_bytes += (held + 1) * largest_unit;
  }
  return out;
}

}  // namespace tessel::plan
