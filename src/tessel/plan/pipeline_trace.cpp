// SPDX-License-Identifier: Apache-2.0
// One pipeline rank's step, shape-only (trace.h, trace_pipeline_rank): the rank's list of actions
// replayed on the meta device as the runtime's executor runs it (parallel/pipeline/executor.cpp)
// over the trainer's stage slices (CausalLM::embed / block / head), so the bytes the meta device
// counts are the ones the allocator would: every micro-batch's ids and targets loaded at the
// start, the activations each in-flight micro-batch keeps until its backward (GPipe: all m;
// 1F1B: up to pp - rank), the receive buffers posted one compute ahead, every send's payload
// kept until the executor retires it after the compute that follows it, the gradients of this
// rank's parameters, and the tied
// embedding's gradient that the first stage adds in after the schedule.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "tessel/autograd/engine.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/autograd/scope.h"
#include "tessel/core/error.h"
#include "tessel/nn/autocast.h"
#include "tessel/ops/ops.h"
#include "tessel/plan/trace.h"
#include "tessel/plan/trace_recorder.h"
#include "tessel/tensor/default_device.h"
#include "tessel/tensor/meta_allocator.h"

namespace tessel::plan {

std::vector<nn::Module*> parameter_holders(nn::Module& root,
                                           const std::vector<std::string>& names) {
  std::map<std::string, nn::Module*> modules;
  for (auto& [path, module] : root.named_modules()) modules.emplace(path, module);
  std::vector<nn::Module*> out;
  for (const std::string& name : names) {
    const size_t dot = name.rfind('.');
    const auto it = modules.find(dot == std::string::npos ? std::string() : name.substr(0, dot));
    TESSEL_CHECK(it != modules.end(), "pipeline trace: no module holds parameter '", name, "'");
    if (std::find(out.begin(), out.end(), it->second) == out.end()) out.push_back(it->second);
  }
  return out;
}

Tensor stage_forward(models::CausalLM& model, const TraceOptions& options, int64_t begin,
                     int64_t end, const Tensor& ids, const Tensor& targets, const Tensor& input) {
  const int64_t blocks = model.num_layers();
  autograd::ScopeGuard root(0);
  Tensor x = begin == 0 ? model.embed(ids) : input;
  for (int64_t l = std::max<int64_t>(begin, 1); l < std::min(end, blocks + 1); ++l)
    x = model.block(l - 1, x);
  if (end == blocks + 2) {
    Tensor logits = model.head(x);
    const int64_t n = targets.numel();
    x = options.loss
            ? options.loss(logits, targets)
            : ops::cross_entropy(ops::reshape(logits, {n, logits.size(2)}), targets.reshape({n}));
  }
  return x;
}

void stage_backward(const Tensor& output, const Tensor& grad_output) {
  if (grad_output.defined()) {
    autograd::backward({output}, {grad_output});
    return;
  }
  Tensor seed;
  {
    autograd::NoGradGuard no_grad;
    seed = ones(output.shape(), output.dtype());
  }
  autograd::backward({output}, {seed});
}

DataParallelRun start_data_parallel(models::CausalLM& model, const TraceOptions& options,
                                    const std::vector<std::string>& trained) {
  if (options.data_parallel) return options.data_parallel(model, trained);
  if (options.gradients_held) {
    std::map<std::string, Tensor> parameters;
    for (const auto& [name, p] : model.named_parameters()) parameters.emplace(name, p);
    for (const std::string& name : trained) {
      Tensor p = parameters.at(name);
      if (!p.grad().defined()) p.set_grad(zeros(p.shape(), DType::F32));
    }
  }
  return {};
}

int PipelineRank::stage_of_layer(int64_t layer) const {
  for (size_t s = 0; s < stage_layers.size(); ++s)
    if (layer >= stage_layers[s].first && layer < stage_layers[s].second) return int(s);
  TESSEL_FAIL("pipeline: layer ", layer, " is in none of the ", stage_layers.size(), " stages");
}

std::vector<std::string> pipeline_rank_parameters(const models::CausalLM& model,
                                                  const PipelineRank& pr, bool with_tied) {
  std::vector<std::string> out;
  const std::vector<std::string> tied = model.head_tied_parameters();
  const bool holds_head =
      pr.owner(pr.num_stages() - 1) == pr.rank && with_tied;  // the head multiplies with them
  for (const auto& [name, p] : model.named_parameters()) {
    const bool own = pr.owner(pr.stage_of_layer(model.layer_of_parameter(name))) == pr.rank;
    const bool head_uses = holds_head && std::find(tied.begin(), tied.end(), name) != tied.end();
    if (own || head_uses) out.push_back(name);
  }
  return out;
}

namespace {

bool is_compute(PipelineActionKind k) {
  return k == PipelineActionKind::Forward || k == PipelineActionKind::Backward;
}
bool is_recv(PipelineActionKind k) {
  return k == PipelineActionKind::RecvActivation || k == PipelineActionKind::RecvGradient;
}

struct Slot {
  Tensor input, output, grad_output;
};

}  // namespace

Graph trace_pipeline_rank(const models::ModelConfig& config, const TraceOptions& options,
                          const PipelineRank& pr) {
  const int64_t seq = options.seq > 0 ? options.seq : config.max_positions();
  TESSEL_CHECK(pr.active() && pr.rank >= 0 && pr.rank < pr.ranks, "pipeline trace: rank ", pr.rank,
               " of ", pr.ranks, " pipeline ranks");
  TESSEL_CHECK(pr.num_stages() == pr.ranks * pr.virtual_stages, "pipeline trace: ", pr.num_stages(),
               " stages for ", pr.ranks, " ranks x ", pr.virtual_stages, " virtual stages");
  DefaultDeviceScope meta(Device::meta());
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  if (options.transform) options.transform(*model);
  models::set_rank_recompute(*model, options.recompute, options.recompute_blocks,
                             rank_blocks(pr, model->num_layers()), options.recompute_rest);
  model->train(options.dropout);
  const int64_t blocks = model->num_layers();
  const int last_stage = pr.num_stages() - 1;
  TESSEL_CHECK(pr.stage_layers.back().second == blocks + 2, "pipeline trace: the stages cover ",
               pr.stage_layers.back().second, " layers, the model has ", blocks + 2);

  Graph graph;
  graph.modules.push_back({"", model->type_name(), -1});
  graph.saved_bytes_by_module.assign(1, 0.0);
  // What this rank holds: its stages' parameters and, on the head's rank, the tied embedding.
  const std::vector<std::string> held = pipeline_rank_parameters(*model, pr, true);
  const std::vector<std::string> trained = pipeline_rank_parameters(*model, pr, false);
  std::map<std::string, Tensor> parameters;
  for (const auto& [name, p] : model->named_parameters()) parameters.emplace(name, p);
  const std::vector<nn::Module*> roots = parameter_holders(*model, held);
  for (const std::string& name : held) {
    const Tensor& p = parameters.at(name);
    graph.parameter_bytes += double(p.storage().nbytes());
    graph.parameter_count += p.numel();
    ++graph.parameter_tensors;
  }
  DataParallelRun dp = start_data_parallel(*model, options, trained);

  TESSEL_CHECK(options.steps >= 1, "pipeline trace: steps must be >= 1, got ", options.steps);
  Recorder recorder(graph, options.half_stand_ins, options.unfused_attention);
  double step_base = 0, after_schedule = 0;
  // One step: the schedule, then the axes' finish; `last`: the traced one.
  const auto run_step = [&](bool last) {
    if (last) {
      step_base = double(meta_allocator().bytes_in_use());
      meta_allocator().reset_peak();
    }
    // The trainer loads every micro-batch before the schedule starts, on every pipeline rank.
    std::vector<std::pair<Tensor, Tensor>> batches;
    for (int i = 0; i < pr.microbatches; ++i)
      batches.emplace_back(empty({options.batch, seq}, DType::I64),
                           empty({options.batch, seq}, DType::I64));
    const DType message_dtype = options.compute_dtype;
    const Shape message_shape{options.batch, options.message_seq > 0 ? options.message_seq : seq,
                              config.hidden_size()};
    {
      std::optional<kernels::KernelObserverScope> observe;
      std::optional<dist::MetaCallObserverScope> observe_calls;
      if (last) {
        observe.emplace(recorder);
        observe_calls.emplace(recorder.collective_observer());
      }
      // Nothing synchronises inside the schedule; the trainer's axes finish after it.
      if (dp.before_backward) dp.before_backward(false);
      std::optional<nn::LowPrecisionScope> autocast;
      if (options.compute_dtype != DType::F32) {
        autocast.emplace(roots, options.compute_dtype, dp.defer);
        if (dp.set_low_precision) dp.set_low_precision(&*autocast);
      }

      const std::vector<PipelineAction>& list = pr.actions;
      std::map<std::pair<int, int>, Slot> slots;
      std::vector<std::optional<Tensor>> posted(list.size());
      size_t posted_upto = 0;
      // Receives are posted up to and including the next compute action (the executor's
      // post_ahead), so their buffers exist while the compute before them runs.
      auto post_ahead = [&](size_t from) {
        size_t end = from;
        while (end < list.size() && !is_compute(list[end].kind)) ++end;
        end = std::min(end + 1, list.size());
        for (; posted_upto < end; ++posted_upto)
          if (is_recv(list[posted_upto].kind))
            posted[posted_upto] = empty(message_shape, message_dtype);
      };
      // A send's payload lives until the executor retires it: it waits for the send after the
      // first compute that follows it (or at the end of the list), a fixed point whatever the
      // receiver's progress. An activation's payload is the stage output its backward keeps anyway;
      // a gradient's is the only reference to the input's gradient, freed after the next compute
      // (docs/PLANNER.md, "Memory model": before the executor retired sends at a fixed point, the
      // last rank's peak moved by one gradient from run to run).
      std::vector<Tensor> sends;  // payloads issued since the last compute
      auto send = [&](Tensor payload) {
        if (last)
          graph.collectives.push_back(
              {"send", "pp", pr.ranks,
               double(payload.numel()) * double(dtype_size(payload.dtype())),
               recorder.backward() ? Phase::Backward : Phase::Forward});
        sends.push_back(std::move(payload));
      };
      post_ahead(0);
      for (size_t i = 0; i < list.size(); ++i) {
        const PipelineAction& a = list[i];
        switch (a.kind) {
          case PipelineActionKind::Forward: {
            post_ahead(i + 1);
            recorder.set_backward(false);
            Slot& s = slots[{a.stage, a.microbatch}];
            const auto [begin, end] = pr.stage_layers[size_t(a.stage)];
            const auto& [ids, targets] = batches[size_t(a.microbatch)];
            s.output = stage_forward(*model, options, begin, end, ids, targets, s.input);
            break;
          }
          case PipelineActionKind::Backward: {
            post_ahead(i + 1);
            recorder.set_backward(true);
            Slot& s = slots[{a.stage, a.microbatch}];
            stage_backward(s.output, a.stage == last_stage ? Tensor() : s.grad_output);
            s.output = Tensor();
            s.grad_output = Tensor();
            if (a.stage == 0) s.input = Tensor();
            break;
          }
          case PipelineActionKind::SendActivation:
            send(slots[{a.stage, a.microbatch}].output.detach());
            break;
          case PipelineActionKind::SendGradient: {
            Slot& s = slots[{a.stage, a.microbatch}];
            send(s.input.grad().defined() ? s.input.grad().detach()
                                          : zeros(message_shape, message_dtype));
            s.input = Tensor();
            break;
          }
          case PipelineActionKind::RecvActivation:
          case PipelineActionKind::RecvGradient: {
            post_ahead(i);
            TESSEL_CHECK(posted[i].has_value(), "pipeline trace: receive ", i, " was not posted");
            Tensor buffer = std::move(*posted[i]);
            posted[i].reset();
            if (a.kind == PipelineActionKind::RecvActivation)
              slots[{a.stage + 1, a.microbatch}].input = buffer.set_requires_grad(true);
            else
              slots[{a.stage - 1, a.microbatch}].grad_output = buffer;
            break;
          }
        }
        if (is_compute(a.kind)) sends.clear();  // the sends issued before this compute retire
      }
      sends.clear();
      slots.clear();
      if (autocast && dp.set_low_precision) dp.set_low_precision(nullptr);
      autocast.reset();
      after_schedule = double(meta_allocator().bytes_in_use());
    }
    // Then the axes finish (ZeRO-3 releases every unit; the gradient sync), before the trainer
    // reads its step peak.
    if (dp.after_backward) dp.after_backward();
    if (dp.finish) dp.finish();
  };
  for (int step = 1; step <= options.steps; ++step) run_step(step == options.steps);
  // The first stage receives the head's gradient of the tied embedding into a buffer of its
  // size and adds it to its own.
  double tied_buffer = 0;
  if (pr.owner(0) == pr.rank && pr.owner(last_stage) != pr.rank)
    for (const std::string& name : model->head_tied_parameters())
      tied_buffer += double(parameters.at(name).storage().nbytes());
  graph.step_peak_bytes = std::max({double(meta_allocator().peak_bytes()), recorder.kernel_peak(),
                                    after_schedule + tied_buffer}) -
                          step_base;
  return graph;
}

}  // namespace tessel::plan
