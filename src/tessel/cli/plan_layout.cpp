// SPDX-License-Identifier: Apache-2.0
#include "tessel/cli/plan_layout.h"

#include <CLI/CLI.hpp>
#include <map>
#include <set>

#include "tessel/core/error.h"
#include "tessel/dist/meta/meta_communicator.h"
#include "tessel/parallel/data/data_parallel.h"
#include "tessel/parallel/expert/expert_tensor_parallel.h"
#include "tessel/parallel/pipeline/generators.h"
#include "tessel/parallel/pipeline/partition.h"
#include "tessel/parallel/tensor/vocab_parallel.h"
#include "tessel/parallel/zero/zero3.h"
#include "tessel/sharding/placement.h"
#include "tessel/tensor/default_device.h"
#include "tessel/train/model_tensor_parallel.h"
#include "tessel/train/pipeline_stage.h"

namespace tessel::cli {

namespace pp = parallel::pipeline;

namespace {

plan::PipelineActionKind kind_of(pp::ActionKind k) {
  switch (k) {
    case pp::ActionKind::Forward:
      return plan::PipelineActionKind::Forward;
    case pp::ActionKind::Backward:
      return plan::PipelineActionKind::Backward;
    case pp::ActionKind::SendActivation:
      return plan::PipelineActionKind::SendActivation;
    case pp::ActionKind::RecvActivation:
      return plan::PipelineActionKind::RecvActivation;
    case pp::ActionKind::SendGradient:
      return plan::PipelineActionKind::SendGradient;
    case pp::ActionKind::RecvGradient:
      return plan::PipelineActionKind::RecvGradient;
  }
  TESSEL_FAIL("pipeline: unknown action kind ", int(k));
}

}  // namespace

plan::PipelineRank pipeline_rank(const models::ModelConfig& config, const std::string& schedule,
                                 int pp_size, int microbatches, int rank, const std::string& split,
                                 const std::function<void(models::CausalLM&)>& tp_transform) {
  TESSEL_CHECK(rank >= 0 && rank < pp_size, "pipeline rank ", rank, " of pp ", pp_size);
  // The schedule is made for every rank at once: callers ask for each rank of one layout in
  // turn (a search at pp 64 over 512 micro-batches would otherwise make it 64 times). A cut of
  // tp's pieces (one rank asked for, by plan offload) is made afresh: a transform has no key.
  thread_local std::string last_key;
  thread_local std::vector<plan::PipelineRank> last;
  const bool pieces = tp_transform && config.has_experts();
  const std::string key = pieces
                              ? std::string()
                              : config.to_json() + "\n" + schedule + "/" + std::to_string(pp_size) +
                                    "/" + std::to_string(microbatches) + "/" + split;
  if (!key.empty() && key == last_key) return last.at(size_t(rank));
  const pp::Schedule s = train::schedule_from_spec(schedule, pp_size, microbatches);
  std::vector<pp::LayerCost> costs;
  {
    DefaultDeviceScope meta(Device::meta());
    std::shared_ptr<models::CausalLM> model = config.build_empty();
    if (pieces) tp_transform(*model);
    costs = train::pipeline_layer_costs(*model);
  }
  TESSEL_CHECK(int64_t(costs.size()) >= s.num_stages(), "pipeline: ", schedule, " at pp ", pp_size,
               " needs ", s.num_stages(), " stages, the model has ", costs.size(),
               " pipeline layers");
  const pp::StagePartition partition = train::pipeline_partition(costs, s.num_stages(), split);
  std::vector<plan::PipelineRank> ranks(static_cast<size_t>(pp_size));
  for (int r = 0; r < pp_size; ++r) {
    plan::PipelineRank& out = ranks[size_t(r)];
    out.schedule = schedule;
    out.ranks = pp_size;
    out.rank = r;
    out.virtual_stages = s.virtual_stages;
    out.microbatches = microbatches;
    for (int64_t st = 0; st < partition.num_stages(); ++st)
      out.stage_layers.push_back(partition.layers_of(st));
    for (const pp::Action& a : s.actions[size_t(r)])
      out.actions.push_back({kind_of(a.kind), a.microbatch, a.stage});
  }
  last = std::move(ranks);
  last_key = key;  // empty after a transform's cut: never matched
  return last.at(size_t(rank));
}

void add_attention_option(CLI::App* cmd, std::string& attention) {
  cmd->add_option("--attention", attention,
                  "Attention's cost: fused (tessel's kernel) or unfused (the scores written and "
                  "read between its kernels, as Megatron-LM before FlashAttention and PyTorch "
                  "eager run it; time only)")
      ->check(CLI::IsMember({"fused", "unfused"}))
      ->capture_default_str();
}

void set_tensor_parallel(plan::MemoryLayout& layout, int tp, int tp_rank,
                         const std::string& plan_path, bool sp, int64_t seq, bool etp) {
  TESSEL_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp, "tensor-parallel rank ", tp_rank, " of tp ",
               tp);
  TESSEL_CHECK(!sp || tp > 1,
               "sequence parallelism (--sp) splits the sequence over the tp ranks, "
               "so it needs tp 2 or more (got tp ",
               tp, ")");
  TESSEL_CHECK(!sp || seq > 0, "sequence parallelism over tp ", tp,
               " needs the sequence length (got ", seq, ")");
  layout.tp = tp;
  layout.tp_plan = tp > 1 ? plan_path : "";
  layout.message_seq = 0;
  if (tp == 1) {
    layout.tp_transform = nullptr;
    layout.tp_loss = nullptr;
    return;
  }
  if (sp) layout.message_seq = sharding::shard_size(seq, tp, tp_rank);
  // One state per transformed model: the memory model builds the model more than once, and each
  // build is parallelized afresh before anything reads the state.
  auto state = std::make_shared<train::ModelTensorParallel>();
  layout.tp_transform = [state, tp, tp_rank, plan_path, sp, seq, etp](models::CausalLM& model) {
    *state = train::parallelize_model(model, dist::make_meta_communicator(tp, tp_rank, "tp"),
                                      plan_path, sp);
    if (etp) {
      parallel::ExpertTensorParallelResult split =
          parallel::parallelize_expert_ffn(model, state->tp);
      for (auto& entry : split.sharded) state->result.sharded.push_back(std::move(entry));
    }
    // As the pipeline trainer does: a stage without the embedding never records the length.
    if (sp && state->result.sequence) state->result.sequence->length = seq;
  };
  layout.tp_loss = [state](const Tensor& logits, const Tensor& targets) {
    return parallel::vocab_parallel_cross_entropy(logits, targets, *state->tp, state->vocab,
                                                  state->vocab_offset);
  };
}

bool tp_sums_gradients(const models::ModelConfig& config, int tp, int tp_rank,
                       const std::string& plan_path, bool sp) {
  if (tp <= 1) return false;
  DefaultDeviceScope meta(Device::meta());
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  const train::ModelTensorParallel state = train::parallelize_model(
      *model, dist::make_meta_communicator(tp, tp_rank, "tp"), plan_path, sp);
  return train::model_tp_sums_gradients(state);
}

plan::OffloadInput offload_input_for(const models::ModelConfig& config,
                                     const plan::MemoryLayout& layout,
                                     const plan::OffloadBudgets& budgets, bool tp_sums,
                                     bool clipped, int ep) {
  // Under ep the rank's experts only (with tp its pieces first, as the trainer cuts them; with
  // pp as well, its stages' pieces).
  TESSEL_CHECK(ep == 1 || (layout.dp > 1 && layout.dp % ep == 0 && layout.zero_stage >= 1),
               "plan offload: --ep ", ep, " must divide --dp ", layout.dp,
               " (ZeRO-1, 2 or 3: each rank offloads its shards)");
  auto experts = std::make_shared<std::set<std::string>>();
  const std::function<void(models::CausalLM&)> transform =
      ep > 1 ? expert_rank_transform(layout, ep, experts) : layout.tp_transform;
  plan::OffloadInput input = plan::offload_input(config, layout.compute_dtype, budgets,
                                                 layout.grad_accum, transform, layout.pipeline);
  input.dp = layout.dp;
  input.zero_stage = layout.dp > 1 ? layout.zero_stage : 0;
  input.scaled = clipped || layout.compute_dtype == DType::F16;
  input.bucket_bytes = layout.bucket_bytes;
  // Under dp x tp each rank offloads its ZeRO shards of its own pieces; where tp sums gradients
  // the trainer keeps the buckets in plain memory and reduces after backward.
  input.tp_sums = layout.dp > 1 && tp_sums;
  if (ep > 1) {
    // Each expert tensor's MoE layer ("<layer>.experts.<name>"), numbered in model order over
    // the layers this rank holds (a pipeline rank's stages').
    input.ep = ep;
    std::map<std::string, int> layer_of;
    for (plan::OffloadTensor& t : input.tensors)
      if (experts->count(t.name)) {
        const std::string layer = t.name.substr(0, t.name.find(".experts."));
        t.expert_layer = layer_of.emplace(layer, int(layer_of.size())).first->second;
      }
    input.recorded_holds =
        layout.pipeline.active()
            ? record_pipeline_holds(config, layout, 3, input.units, ep, input.tp_sums)
            : record_ep_holds(config, layout, ep, 3, input.units, input.tp_sums);
    return input;
  }
  // A pipeline rank's shards: the holds of the runtime's own objects over its schedule. Otherwise
  // ZeRO-1/2's buckets complete as backward makes their gradients ready.
  if (layout.dp > 1 && layout.pipeline.active())
    input.recorded_holds = record_pipeline_holds(config, layout, 3, input.units, 1, input.tp_sums);
  else if (layout.dp > 1 && input.zero_stage < 3)
    input.grad_order =
        plan::gradient_ready_order(config, input, layout.tp_transform, layout.tp_loss);
  return input;
}

std::vector<parallel::Zero3Unit> zero3_rank_units(models::CausalLM& model,
                                                  const std::vector<std::string>& trained,
                                                  bool stages) {
  // As the trainer's units: one per block and the final norm, one per other parameter; under pp
  // those of the rank's parameters, the embeddings hooked on their own modules.
  std::vector<parallel::Zero3Unit> units;
  const std::set<std::string> training(trained.begin(), trained.end());
  for (parallel::Zero3Unit& u : parallel::zero3_units(model, model.unit_paths())) {
    std::erase_if(u.params, [&](const std::string& p) { return !training.contains(p); });
    if (u.params.empty()) continue;
    if (stages && u.module == &model) u.module = train::owner_module(model, u.params[0]);
    units.push_back(std::move(u));
  }
  return units;
}

void set_data_parallel(plan::MemoryLayout& layout) {
  if (layout.dp <= 1 || layout.zero_stage < 2) {
    layout.dp_transform = nullptr;
    return;
  }
  const int dp = layout.dp, stage = layout.zero_stage;
  const int64_t bucket_bytes = layout.bucket_bytes;
  layout.dp_transform = [dp, stage, bucket_bytes](models::CausalLM& model,
                                                  const std::vector<std::string>& trained) {
    struct State {
      std::unique_ptr<parallel::DataParallel> ddp;
      std::unique_ptr<parallel::Zero3Parameters> zero3;
    };
    auto state = std::make_shared<State>();
    const nn::NamedTensors all = model.named_parameters();
    std::map<std::string, Tensor> by_name(all.begin(), all.end());
    nn::NamedTensors params;
    for (const std::string& name : trained) params.emplace_back(name, by_name.at(name));
    // A pipeline rank trains some of the parameters only.
    const bool stages = params.size() != all.size();
    parallel::DataParallelOptions options;
    options.bucket_bytes = bucket_bytes;
    options.reduction = parallel::GradReduction::ReduceScatter;
    std::vector<parallel::Zero3Unit> units;
    if (stage == 3) {
      units = zero3_rank_units(model, trained, stages);
      options.groups = parallel::zero3_groups(params, units);
    }
    state->ddp = std::make_unique<parallel::DataParallel>(
        params, dist::make_meta_communicator(dp, 0, "dp"), options);
    if (stage == 3) {
      parallel::Zero3Options zo;
      zo.copy_values = false;
      state->zero3 = std::make_unique<parallel::Zero3Parameters>(*state->ddp, units, zo);
    }
    // The state a step after the first finds: the gradient shards made, no full buffer left.
    state->ddp->finish_gradient_sync();
    model.zero_grad();
    plan::DataParallelRun run;
    parallel::DataParallel* ddp = state->ddp.get();
    parallel::Zero3Parameters* zero3 = state->zero3.get();
    run.before_backward = [ddp](bool last) { ddp->set_sync(last); };
    run.finish = [ddp] {
      ddp->set_sync(true);
      ddp->finish_gradient_sync();
    };
    if (zero3) {
      run.after_backward = [zero3] { zero3->finish_backward(); };
      run.defer = [zero3](const Tensor& p) { return zero3->holds(p); };
      run.set_low_precision = [zero3](nn::LowPrecisionScope* s) { zero3->set_low_precision(s); };
    }
    run.state = std::move(state);
    return run;
  };
}

DType precision_dtype(const std::string& precision) {
  if (precision == "bf16") return DType::BF16;
  if (precision == "fp16") return DType::F16;
  return DType::F32;
}

void set_rank_recompute(plan::MemoryLayout& layout, const std::string& spec, int r, int pp) {
  const nn::RankRecompute rc = nn::rank_recompute(spec, r, pp);
  layout.recompute = rc.mode;
  layout.recompute_blocks = rc.blocks;
  layout.recompute_rest = rc.rest;
}

RankTraces trace_ranks(const models::ModelConfig& config, const plan::MemoryLayout& layout,
                       const std::string& schedule, int pp, const std::string& split,
                       const std::string& recompute) {
  RankTraces out;
  for (int r = 0; r < pp; ++r) {
    plan::MemoryLayout l = layout;
    if (!recompute.empty()) set_rank_recompute(l, recompute, r, pp);
    if (pp > 1)
      l.pipeline = pipeline_rank(config, schedule, pp, int(layout.grad_accum), r, split,
                                 layout.tp_transform);
    out.graphs.push_back(plan::trace_for_layout(config, l));
    out.memory.push_back(plan::estimate_memory(config, l, out.graphs.back()));
  }
  return out;
}

plan::StepTime predict_step_time(const plan::Cluster& cluster, const models::ModelConfig& config,
                                 const plan::MemoryLayout& layout, const std::string& schedule,
                                 int pp, const RankTraces& traced, const std::string& split) {
  if (pp == 1)
    return plan::estimate_step_time(cluster, traced.graphs.at(0), traced.memory.at(0), layout);
  plan::MemoryLayout first = layout;
  first.pipeline =
      pipeline_rank(config, schedule, pp, int(layout.grad_accum), 0, split, layout.tp_transform);
  return plan::estimate_pipeline_step_time(cluster, traced.graphs, traced.memory, first);
}

}  // namespace tessel::cli
