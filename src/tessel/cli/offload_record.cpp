// SPDX-License-Identifier: Apache-2.0
// A pipeline rank's ZeRO holds for the offload model (cli/plan_layout.h, record_pipeline_holds):
// the runtime's own DataParallel and Zero3Parameters run the rank's schedule on the meta device,
// as the trainer sets them up under memory offload, and every hold they take of a bucket tensor,
// its release and every discard of a full buffer are written down in order. Their interplay with
// the schedule (ZeRO-3 prefetches along the order the last forward ran its units, which crosses
// micro-batches and steps; DataParallel lets a bucket go once a backward has delivered all of it)
// is state of those objects, not a formula, so the planner reads it from them (docs/PLANNER.md,
// "Offload"). At ZeRO-1/2 under mixed precision the offload layer's unit spans
// (train/strategy/unit_hooks.h), which hold the replicas' 16-bit copies, are recorded among them.
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "tessel/cli/plan_layout.h"
#include "tessel/core/error.h"
#include "tessel/dist/meta/meta_communicator.h"
#include "tessel/nn/autocast.h"
#include "tessel/parallel/data/data_parallel.h"
#include "tessel/parallel/zero/zero3.h"
#include "tessel/plan/trace.h"
#include "tessel/train/strategy/unit_hooks.h"

namespace tessel::cli {

namespace {

using Record = std::vector<std::vector<plan::ShardHoldEvent>>;

// ZeRO-1/2 under mixed precision: each unit's 16-bit copies held over the unit's spans, as
// OffloadStrategy holds their chunks (the same UnitHooks), and taken from the step's precision
// scope as the unit's forward starts (OffloadStrategy::forward_begin).
struct CopyHolds final : train::UnitHooks::Listener {
  std::shared_ptr<Record> record;
  std::vector<std::vector<Tensor>> masters;  // per unit, its parameters that have copies
  nn::LowPrecisionScope* scope = nullptr;
  void add(plan::ShardHoldEvent::Kind kind, size_t k) {
    TESSEL_CHECK(!record->empty(), "record_pipeline_holds: a unit's span before the first step");
    record->back().push_back({kind, plan::ShardHoldEvent::Copies, int64_t(k),
                              kind == plan::ShardHoldEvent::Hold, false});
  }
  void forward_begin(size_t k) override {
    add(plan::ShardHoldEvent::Hold, k);
    if (scope)
      for (const Tensor& m : masters[k]) scope->cast_deferred(m);
  }
  void forward_end(size_t k) override { add(plan::ShardHoldEvent::Release, k); }
  void backward_begin(size_t k) override { add(plan::ShardHoldEvent::Hold, k); }
  void backward_end(size_t k) override { add(plan::ShardHoldEvent::Release, k); }
};

}  // namespace

std::vector<std::vector<plan::ShardHoldEvent>> record_pipeline_holds(
    const models::ModelConfig& config, const plan::MemoryLayout& layout, int steps,
    const std::vector<plan::OffloadUnit>& expected_units) {
  using plan::ShardHoldEvent;
  const plan::PipelineRank& pr = layout.pipeline;
  TESSEL_CHECK(pr.active() && layout.dp > 1 && layout.zero_stage >= 1 && layout.zero_stage <= 3,
               "record_pipeline_holds: a pipeline rank under dp at ZeRO-1, 2 or 3 (pp ", pr.ranks,
               ", dp ", layout.dp, ", ZeRO-", layout.zero_stage, ")");
  TESSEL_CHECK(steps >= 1, "record_pipeline_holds: steps ", steps, " must be >= 1");
  auto record = std::make_shared<Record>();
  const int dp = layout.dp, stage = layout.zero_stage;
  const int64_t bucket_bytes = layout.bucket_bytes;
  // The first stage's rank receives the head's gradient of a tied embedding after the schedule.
  const bool adds_tied = pr.owner(0) == pr.rank && pr.owner(pr.num_stages() - 1) != pr.rank;
  const bool copies = layout.zero_stage < 3 && layout.compute_dtype != DType::F32;

  plan::TraceOptions options;
  options.batch = 1;
  options.seq = 2;  // the holds follow the schedule and the units, not the activations' sizes
  options.compute_dtype = layout.compute_dtype;
  options.transform = layout.tp_transform;
  options.loss = layout.tp_loss;
  options.steps = steps;
  options.data_parallel = [=](models::CausalLM& model, const std::vector<std::string>& trained) {
    struct State {
      std::unique_ptr<parallel::DataParallel> ddp;
      std::unique_ptr<parallel::Zero3Parameters> zero3;
      std::map<const TensorImpl*, std::pair<ShardHoldEvent::Part, int64_t>> parts;
      std::vector<std::string> tied;
      CopyHolds copy_holds;
      std::unique_ptr<train::UnitHooks> hooks;
      std::set<const TensorImpl*> covered;
    };
    auto state = std::make_shared<State>();
    nn::NamedTensors params;
    for (const std::string& name : trained) params.emplace_back(name, model.find(name));
    parallel::DataParallelOptions o;
    o.bucket_bytes = bucket_bytes;
    o.reduction =
        stage >= 2 ? parallel::GradReduction::ReduceScatter : parallel::GradReduction::AllReduce;
    // Laid out by the caller, as the trainer's offload lays them out in chunks (a layout whose
    // buffers stay plain memory holds the same shards; the model drops the buffers' holds).
    o.allocate_buckets = false;
    o.allocate_gradient_shards = false;
    // The trainer's units: ZeRO-3's gathers, or under mixed precision ZeRO-1/2's copies' spans.
    std::vector<parallel::Zero3Unit> units;
    if (stage == 3 || copies) units = zero3_rank_units(model, trained, /*stages=*/true);
    if (stage == 3) o.groups = parallel::zero3_groups(params, units);
    state->ddp = std::make_unique<parallel::DataParallel>(
        params, dist::make_meta_communicator(dp, 0, "dp"), o);
    parallel::DataParallel& ddp = *state->ddp;
    if (stage == 3) {
      parallel::Zero3Options zo;
      zo.copy_values = false;
      zo.allocate_shards = false;
      state->zero3 = std::make_unique<parallel::Zero3Parameters>(ddp, units, zo);
      for (size_t k = 0; k < state->zero3->unit_count(); ++k)
        TESSEL_CHECK(state->zero3->unit_bucket(k) == int64_t(units.size() - 1 - k),
                     "record_pipeline_holds: unit ", k, " has bucket ",
                     state->zero3->unit_bucket(k),
                     "; the offload model expects units in "
                     "reverse bucket order");
    }
    for (int64_t b = 0; b < ddp.bucket_count(); ++b) {
      state->parts[ddp.bucket_buffer(b).impl_ptr().get()] = {ShardHoldEvent::Buffer, b};
      if (stage >= 2)
        state->parts[ddp.gradient_shard(b).impl_ptr().get()] = {ShardHoldEvent::GradShard, b};
      if (state->zero3)
        state->parts[state->zero3->parameter_shard(b).impl_ptr().get()] = {ShardHoldEvent::Param,
                                                                           b};
    }
    if (copies) {
      // The units the model laid the copies out by, hooked after DataParallel's grad-ready
      // hooks, as the trainer builds the offload after the dp axis.
      TESSEL_CHECK(units.size() == expected_units.size(), "record_pipeline_holds: ", units.size(),
                   " units hooked, the offload model has ", expected_units.size());
      for (const Tensor& m : nn::LowPrecisionScope::masters({&model}))
        state->covered.insert(m.impl_ptr().get());
      std::vector<train::UnitHooks::Unit> hooked;
      state->copy_holds.record = record;
      for (size_t k = 0; k < units.size(); ++k) {
        TESSEL_CHECK(units[k].name == expected_units[k].name, "record_pipeline_holds: unit ", k,
                     " is '", units[k].name, "', the offload model's is '", expected_units[k].name,
                     "'");
        train::UnitHooks::Unit& u = hooked.emplace_back();
        u.module = units[k].module;
        std::vector<Tensor>& with_copies = state->copy_holds.masters.emplace_back();
        for (const std::string& name : units[k].params) {
          const Tensor p = model.find(name);
          u.params.push_back(p);
          if (state->covered.count(p.impl_ptr().get())) with_copies.push_back(p);
        }
      }
      state->hooks = std::make_unique<train::UnitHooks>(std::move(hooked), state->copy_holds);
    }
    if (adds_tied)
      for (const std::string& name : model.head_tied_parameters())
        if (std::find(trained.begin(), trained.end(), name) != trained.end())
          state->tied.push_back(name);
    State* st = state.get();
    const parallel::ShardHold hold = [st, record](const Tensor& t,
                                                  parallel::ShardUse use) -> std::shared_ptr<void> {
      auto it = st->parts.find(t.impl_ptr().get());
      TESSEL_CHECK(it != st->parts.end(),
                   "record_pipeline_holds: a hold of a tensor that is no "
                   "bucket's buffer or shard");
      TESSEL_CHECK(!record->empty(), "record_pipeline_holds: a hold before the first step");
      const auto [part, bucket] = it->second;
      if (use == parallel::ShardUse::Discard) {
        record->back().push_back({ShardHoldEvent::Discard, part, bucket});
        return nullptr;
      }
      // OffloadStrategy::shard_hold's tiers: a gather reads and backward's accumulation writes
      // in the device tier; reductions and the update write, the norm reads, in the host tier.
      const bool device =
          use == parallel::ShardUse::Gather || use == parallel::ShardUse::Accumulate;
      const bool write = use != parallel::ShardUse::Gather && use != parallel::ShardUse::Read;
      record->back().push_back({ShardHoldEvent::Hold, part, bucket, device, write});
      return std::shared_ptr<void>(static_cast<void*>(record.get()), [record, part, bucket](void*) {
        record->back().push_back({ShardHoldEvent::Release, part, bucket});
      });
    };
    ddp.set_shard_hold(hold);
    if (state->zero3) state->zero3->set_shard_hold(hold);

    plan::DataParallelRun run;
    parallel::Zero3Parameters* zero3 = state->zero3.get();
    run.before_backward = [st, record](bool last) {
      record->emplace_back();  // a step's schedule begins
      st->ddp->set_sync(last);
    };
    run.after_backward = [st] {
      // PipelineStrategy::forward_backward: the head's gradient added into the bucket's chunk.
      for (const std::string& name : st->tied)
        for (const parallel::DataParallel::Place& p : st->ddp->places())
          if (p.name == name) st->ddp->add_to_gradient(name, zeros(p.param.shape(), DType::F32));
      if (st->zero3) st->zero3->finish_backward();
      if (st->hooks) st->hooks->end_backwards();  // OffloadStrategy::after_backward
    };
    run.finish = [st] {
      st->ddp->set_sync(true);
      st->ddp->finish_gradient_sync();
    };
    if (zero3) {
      run.defer = [zero3](const Tensor& p) { return zero3->holds(p); };
      run.set_low_precision = [zero3](nn::LowPrecisionScope* s) { zero3->set_low_precision(s); };
    } else if (st->hooks) {  // the kept copies: every covered master deferred to its unit
      run.defer = [st](const Tensor& p) { return st->covered.count(p.impl_ptr().get()) > 0; };
      run.set_low_precision = [st](nn::LowPrecisionScope* s) { st->copy_holds.scope = s; };
    }
    run.state = std::move(state);
    return run;
  };
  plan::trace_pipeline_rank(config, options, pr);
  TESSEL_CHECK(int(record->size()) == steps, "record_pipeline_holds: ", record->size(),
               " steps recorded of ", steps);
  return std::move(*record);
}

}  // namespace tessel::cli
