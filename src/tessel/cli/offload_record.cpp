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
// An expert-parallel rank's holds likewise (record_ep_holds): the dense axis's objects over dp and
// the experts' own over the ranks holding the same experts, run through the trainer's micro-batch
// loop on the model split over ep with a stand-in exchange (cli/expert_meta.cpp).
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "tessel/autograd/engine.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/cli/plan_layout.h"
#include "tessel/core/error.h"
#include "tessel/dist/meta/meta_communicator.h"
#include "tessel/nn/autocast.h"
#include "tessel/ops/elementwise.h"
#include "tessel/parallel/data/data_parallel.h"
#include "tessel/parallel/zero/zero3.h"
#include "tessel/plan/trace.h"
#include "tessel/tensor/default_device.h"
#include "tessel/train/strategy/expert_parallel_strategy.h"
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

  // Hooks the units the model laid the copies out by (checked against the offload model's), after
  // DataParallel's grad-ready hooks, as the trainer builds the offload after the dp axis.
  std::unique_ptr<train::UnitHooks> hook(models::CausalLM& model,
                                         const std::vector<parallel::Zero3Unit>& units,
                                         const std::vector<plan::OffloadUnit>& expected,
                                         std::set<const TensorImpl*>& covered) {
    TESSEL_CHECK(units.size() == expected.size(), "offload record: ", units.size(),
                 " units hooked, the offload model has ", expected.size());
    // Only the units' masters wait for a unit: a pipeline rank's other ones (the last stage's
    // tied head weight, trained by the first stage) are cast when the scope opens, as the
    // trainer's offload casts what it does not hold in chunks.
    std::set<const TensorImpl*> in_units;
    for (const parallel::Zero3Unit& u : units)
      for (const std::string& name : u.params) in_units.insert(model.find(name).impl_ptr().get());
    for (const Tensor& m : nn::LowPrecisionScope::masters({&model}))
      if (in_units.count(m.impl_ptr().get())) covered.insert(m.impl_ptr().get());
    std::vector<train::UnitHooks::Unit> hooked;
    for (size_t k = 0; k < units.size(); ++k) {
      TESSEL_CHECK(units[k].name == expected[k].name, "offload record: unit ", k, " is '",
                   units[k].name, "', the offload model's is '", expected[k].name, "'");
      train::UnitHooks::Unit& u = hooked.emplace_back();
      u.module = units[k].module;
      std::vector<Tensor>& with_copies = masters.emplace_back();
      for (const std::string& name : units[k].params) {
        const Tensor p = model.find(name);
        u.params.push_back(p);
        if (covered.count(p.impl_ptr().get())) with_copies.push_back(p);
      }
    }
    return std::make_unique<train::UnitHooks>(std::move(hooked), *this);
  }
};

// The holds DataParallels and Zero3Parameters take of their bucket tensors, written into the
// record as OffloadStrategy::shard_hold's tiers would see them.
class HoldRecorder {
 public:
  explicit HoldRecorder(std::shared_ptr<Record> record) : record_(std::move(record)) {}

  // Names `ddp`'s buffers, gradient shards (stage 2 and 3) and `zero3`'s parameter shards as
  // parts of its buckets (`expert`: the experts' own).
  void add(parallel::DataParallel& ddp, parallel::Zero3Parameters* zero3, int stage, bool expert) {
    using plan::ShardHoldEvent;
    for (int64_t b = 0; b < ddp.bucket_count(); ++b) {
      parts_[ddp.bucket_buffer(b).impl_ptr().get()] = {ShardHoldEvent::Buffer, b, expert};
      if (stage >= 2)
        parts_[ddp.gradient_shard(b).impl_ptr().get()] = {ShardHoldEvent::GradShard, b, expert};
      if (zero3)
        parts_[zero3->parameter_shard(b).impl_ptr().get()] = {ShardHoldEvent::Param, b, expert};
    }
  }

  parallel::ShardHold hold() const {
    using plan::ShardHoldEvent;
    const auto parts = &parts_;
    const std::shared_ptr<Record> record = record_;
    return [parts, record](const Tensor& t, parallel::ShardUse use) -> std::shared_ptr<void> {
      auto it = parts->find(t.impl_ptr().get());
      TESSEL_CHECK(it != parts->end(),
                   "offload record: a hold of a tensor that is no bucket's buffer or shard");
      TESSEL_CHECK(!record->empty(), "offload record: a hold before the first step");
      const Part p = it->second;
      if (use == parallel::ShardUse::Discard) {
        record->back().push_back(
            {ShardHoldEvent::Discard, p.part, p.bucket, false, false, p.expert});
        return nullptr;
      }
      // OffloadStrategy::shard_hold's tiers: a gather reads and backward's accumulation writes
      // in the device tier; reductions and the update write, the norm reads, in the host tier.
      const bool device =
          use == parallel::ShardUse::Gather || use == parallel::ShardUse::Accumulate;
      const bool write = use != parallel::ShardUse::Gather && use != parallel::ShardUse::Read;
      record->back().push_back({ShardHoldEvent::Hold, p.part, p.bucket, device, write, p.expert});
      return std::shared_ptr<void>(static_cast<void*>(record.get()), [record, p](void*) {
        record->back().push_back(
            {ShardHoldEvent::Release, p.part, p.bucket, false, false, p.expert});
      });
    };
  }

 private:
  struct Part {
    plan::ShardHoldEvent::Part part;
    int64_t bucket;
    bool expert;
  };
  std::shared_ptr<Record> record_;
  std::map<const TensorImpl*, Part> parts_;
};

parallel::DataParallelOptions recorded_options(int stage, int64_t bucket_bytes) {
  parallel::DataParallelOptions o;
  o.bucket_bytes = bucket_bytes;
  o.reduction =
      stage >= 2 ? parallel::GradReduction::ReduceScatter : parallel::GradReduction::AllReduce;
  // Laid out by the caller, as the trainer's offload lays them out in chunks (a layout whose
  // buffers stay plain memory holds the same shards; the model drops the buffers' holds).
  o.allocate_buckets = false;
  o.allocate_gradient_shards = false;
  return o;
}

std::unique_ptr<parallel::Zero3Parameters> recorded_zero3(parallel::DataParallel& ddp,
                                                          std::vector<parallel::Zero3Unit> units) {
  parallel::Zero3Options zo;
  zo.copy_values = false;
  zo.allocate_shards = false;
  auto zero3 = std::make_unique<parallel::Zero3Parameters>(ddp, std::move(units), zo);
  for (size_t k = 0; k < zero3->unit_count(); ++k)
    TESSEL_CHECK(zero3->unit_bucket(k) == int64_t(zero3->unit_count() - 1 - k),
                 "offload record: unit ", k, " has bucket ", zero3->unit_bucket(k),
                 "; the offload model expects units in reverse bucket order");
  return zero3;
}

// A rank's data-parallel objects as the trainer builds them under memory offload, every hold of
// their bucket tensors recorded. Under ep the experts' axis comes first (ExpertParallelStrategy
// before the dp axis): their buckets over the dp / ep ranks holding the same experts, reduced
// after backward (offloaded, nothing overlaps), ZeRO-3's units one per MoE layer; then the dense
// parameters' over dp, ZeRO-3's units without the experts. `stages`: a pipeline rank's units.
class RecordedAxes {
 public:
  RecordedAxes(models::CausalLM& model, const std::vector<std::string>& trained,
               const std::set<std::string>& experts, const plan::MemoryLayout& layout, int ep,
               bool stages, std::shared_ptr<Record> record, bool tp_sums = false)
      : stage_(layout.zero_stage),
        after_tp_sums_(tp_sums && layout.zero_stage >= 2),
        holds_(std::move(record)) {
    std::vector<std::string> dense;
    nn::NamedTensors params, expert_params;
    std::set<std::string> trained_experts;
    for (const std::string& name : trained) {
      if (experts.count(name)) {
        expert_params.emplace_back(name, model.find(name));
        trained_experts.insert(name);
      } else {
        params.emplace_back(name, model.find(name));
        dense.push_back(name);
      }
    }
    if (!expert_params.empty()) {
      parallel::DataParallelOptions eo = recorded_options(stage_, layout.bucket_bytes);
      eo.overlap = false;
      std::vector<parallel::Zero3Unit> units;
      if (stage_ == 3) {
        units = train::expert_zero3_units(model, trained_experts);
        eo.groups = parallel::zero3_groups(expert_params, units);
      }
      experts_ = std::make_unique<parallel::DataParallel>(
          expert_params, dist::make_meta_communicator(layout.dp / ep, 0, "ep_dp"), eo);
      if (stage_ == 3) expert_zero3_ = recorded_zero3(*experts_, std::move(units));
      holds_.add(*experts_, expert_zero3_.get(), stage_, true);
    }
    parallel::DataParallelOptions o = recorded_options(stage_, layout.bucket_bytes);
    std::vector<parallel::Zero3Unit> units;
    if (stage_ == 3) {
      units = zero3_rank_units(model, dense, stages);
      o.groups = parallel::zero3_groups(params, units);
    }
    dense_ = std::make_unique<parallel::DataParallel>(
        params, dist::make_meta_communicator(layout.dp, 0, "dp"), o);
    if (stage_ == 3) zero3_ = recorded_zero3(*dense_, std::move(units));
    holds_.add(*dense_, zero3_.get(), stage_, false);
    hold_ = holds_.hold();
    for (parallel::DataParallel* d : {dense_.get(), experts_.get()})
      if (d) d->set_shard_hold(hold_);
    for (parallel::Zero3Parameters* z : {zero3_.get(), expert_zero3_.get()})
      if (z) z->set_shard_hold(hold_);
  }
  RecordedAxes(const RecordedAxes&) = delete;  // the holds point into it
  RecordedAxes& operator=(const RecordedAxes&) = delete;

  parallel::DataParallel& dense() { return *dense_; }
  // The axes' before_backward: the last micro-batch syncs the dense buckets, the experts never.
  // Where tp sums gradients (sequence parallelism) ZeRO-2/3's dense reductions wait for the sums
  // (DataParallelSetup::after_other_sums): nothing launches before the step's sync.
  void before_backward(bool last) {
    dense_->set_sync(last && !after_tp_sums_);
    if (experts_) experts_->set_sync(false);
  }
  void after_backward() {  // no unit stays gathered
    for (parallel::Zero3Parameters* z : {zero3_.get(), expert_zero3_.get()})
      if (z) z->finish_backward();
  }
  // The gradient sync: the dense axis's, then the experts', whose shards then take their 1 / ep,
  // each held while written (ExpertParallelStrategy::sync_gradients; ZeRO-1's all-reduced
  // buckets are plain memory).
  void sync() {
    for (parallel::DataParallel* d : {dense_.get(), experts_.get()}) {
      if (!d) continue;
      d->set_sync(true);
      d->finish_gradient_sync();
    }
    if (experts_ && stage_ >= 2)
      for (int64_t b = 0; b < experts_->bucket_count(); ++b)
        hold_(experts_->gradient_shard(b), parallel::ShardUse::Update);
  }
  // ZeRO-3 under mixed precision: the masters whose copies wait for their unit's gather, and the
  // scope both axes make them from (null: none).
  bool gathers() const { return zero3_ != nullptr; }
  bool defers(const Tensor& p) const {
    return zero3_->holds(p) || (expert_zero3_ && expert_zero3_->holds(p));
  }
  void set_low_precision(nn::LowPrecisionScope* scope) {
    for (parallel::Zero3Parameters* z : {zero3_.get(), expert_zero3_.get()})
      if (z) z->set_low_precision(scope);
  }

 private:
  int stage_;
  bool after_tp_sums_;
  HoldRecorder holds_;
  parallel::ShardHold hold_;
  std::unique_ptr<parallel::DataParallel> experts_, dense_;
  std::unique_ptr<parallel::Zero3Parameters> expert_zero3_, zero3_;
};

}  // namespace

std::vector<std::vector<plan::ShardHoldEvent>> record_pipeline_holds(
    const models::ModelConfig& config, const plan::MemoryLayout& layout, int steps,
    const std::vector<plan::OffloadUnit>& expected_units, int ep, bool tp_sums) {
  const plan::PipelineRank& pr = layout.pipeline;
  TESSEL_CHECK(pr.active() && layout.dp > 1 && layout.zero_stage >= 1 && layout.zero_stage <= 3,
               "record_pipeline_holds: a pipeline rank under dp at ZeRO-1, 2 or 3 (pp ", pr.ranks,
               ", dp ", layout.dp, ", ZeRO-", layout.zero_stage, ")");
  TESSEL_CHECK(steps >= 1, "record_pipeline_holds: steps ", steps, " must be >= 1");
  TESSEL_CHECK(ep == 1 || layout.dp % ep == 0, "record_pipeline_holds: ep ", ep, " must divide dp ",
               layout.dp);
  auto record = std::make_shared<Record>();
  // The first stage's rank receives the head's gradient of a tied embedding after the schedule.
  const bool adds_tied = pr.owner(0) == pr.rank && pr.owner(pr.num_stages() - 1) != pr.rank;
  const bool copies = layout.zero_stage < 3 && layout.compute_dtype != DType::F32;

  plan::TraceOptions options;
  options.batch = 1;
  options.seq = 2;  // the holds follow the schedule and the units, not the activations' sizes
  options.compute_dtype = layout.compute_dtype;
  options.transform = layout.tp_transform;
  // Under sequence parallelism the layout's rows (set_tensor_parallel's length, which a stage
  // without the embedding reads) and its messages of the rank's piece of them.
  const bool sp = layout.message_seq > 0;
  if (sp) {
    options.seq = layout.seq > 0 ? layout.seq : config.max_positions();
    options.message_seq = layout.message_seq;
  }
  // Under ep the rank's experts, and tokens enough that the meta routing reaches every one.
  auto experts = std::make_shared<std::set<std::string>>();
  if (ep > 1) {
    options.transform = expert_rank_transform(layout, ep, experts);
    DefaultDeviceScope meta(Device::meta());
    const int64_t tokens = tokens_for_every_expert(*config.build_empty(), layout);
    if (!sp) options.seq = std::min(std::max(tokens, options.seq), config.max_positions());
    options.batch = (tokens + options.seq - 1) / options.seq;
  }
  options.loss = layout.tp_loss;
  options.steps = steps;
  options.data_parallel = [=](models::CausalLM& model, const std::vector<std::string>& trained) {
    struct State {
      std::unique_ptr<RecordedAxes> axes;
      std::vector<std::string> tied;
      CopyHolds copy_holds;
      std::unique_ptr<train::UnitHooks> hooks;
      std::set<const TensorImpl*> covered;
    };
    auto state = std::make_shared<State>();
    state->axes = std::make_unique<RecordedAxes>(model, trained, *experts, layout, ep,
                                                 /*stages=*/true, record, tp_sums);
    if (copies) {  // the units of every parameter, the experts' in their blocks'
      state->copy_holds.record = record;
      state->hooks = state->copy_holds.hook(
          model, zero3_rank_units(model, trained, /*stages=*/true), expected_units, state->covered);
    }
    if (adds_tied)
      for (const std::string& name : model.head_tied_parameters())
        if (std::find(trained.begin(), trained.end(), name) != trained.end())
          state->tied.push_back(name);
    State* st = state.get();
    RecordedAxes* axes = state->axes.get();

    plan::DataParallelRun run;
    run.before_backward = [axes, record](bool last) {
      record->emplace_back();  // a step's schedule begins
      axes->before_backward(last);
    };
    run.after_backward = [st, axes] {
      // PipelineStrategy::forward_backward: the head's gradient added into the bucket's chunk.
      parallel::DataParallel& ddp = axes->dense();
      for (const std::string& name : st->tied)
        for (const parallel::DataParallel::Place& p : ddp.places())
          if (p.name == name) ddp.add_to_gradient(name, zeros(p.param.shape(), DType::F32));
      axes->after_backward();
      if (st->hooks) st->hooks->end_backwards();  // OffloadStrategy::after_backward
    };
    run.finish = [axes] { axes->sync(); };
    if (axes->gathers()) {
      run.defer = [axes](const Tensor& p) { return axes->defers(p); };
      run.set_low_precision = [axes](nn::LowPrecisionScope* s) { axes->set_low_precision(s); };
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

std::vector<std::vector<plan::ShardHoldEvent>> record_ep_holds(
    const models::ModelConfig& config, const plan::MemoryLayout& layout, int ep, int steps,
    const std::vector<plan::OffloadUnit>& expected_units, bool tp_sums) {
  const int dp = layout.dp, stage = layout.zero_stage;
  TESSEL_CHECK(ep > 1 && dp % ep == 0 && stage >= 1 && stage <= 3 && !layout.pipeline.active(),
               "record_ep_holds: an expert-parallel rank under dp at ZeRO-1, 2 or 3 without pp "
               "(ep ",
               ep, ", dp ", dp, ", ZeRO-", stage, ")");
  TESSEL_CHECK(steps >= 1, "record_ep_holds: steps ", steps, " must be >= 1");
  const DType compute = layout.compute_dtype;
  const bool copies = stage < 3 && compute != DType::F32;
  DefaultDeviceScope meta(Device::meta());
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  auto experts = std::make_shared<std::set<std::string>>();
  expert_rank_transform(layout, ep, experts)(*model);
  model->train();
  std::vector<std::string> all;
  for (const auto& [name, p] : model->named_parameters()) all.push_back(name);
  auto record = std::make_shared<Record>();
  RecordedAxes axes(*model, all, *experts, layout, ep, /*stages=*/false, record, tp_sums);
  // ZeRO-1/2 under mixed precision: the copies' spans over the whole model's units (experts in
  // their blocks').
  CopyHolds copy_holds;
  std::set<const TensorImpl*> covered;
  std::unique_ptr<train::UnitHooks> hooks;
  if (copies) {
    copy_holds.record = record;
    hooks = copy_holds.hook(*model, zero3_rank_units(*model, all, /*stages=*/false), expected_units,
                            covered);
  }

  // Enough tokens that the meta routing reaches every expert.
  const int64_t tokens = tokens_for_every_expert(*model, layout);
  const int64_t seq = std::min(tokens, config.max_positions());
  const int64_t rows = (tokens + seq - 1) / seq;
  for (int step = 0; step < steps; ++step) {
    record->emplace_back();
    for (int64_t m = 0; m < layout.grad_accum; ++m) {
      // Trainer::forward_backward: the axes' micro-batch scope (the 16-bit copies), the loss
      // with the experts' auxiliary losses, the axes' before_backward, backward, after_backward.
      std::optional<nn::LowPrecisionScope> scope;
      if (compute != DType::F32) {
        if (axes.gathers()) {
          scope.emplace(std::vector<nn::Module*>{model.get()}, compute,
                        [&](const Tensor& p) { return axes.defers(p); });
          axes.set_low_precision(&*scope);
        } else {
          scope.emplace(std::vector<nn::Module*>{model.get()}, compute,
                        [&](const Tensor& p) { return covered.count(p.impl_ptr().get()) > 0; });
          copy_holds.scope = &*scope;
        }
      }
      const Tensor ids = empty({rows, seq}, DType::I64), targets = empty({rows, seq}, DType::I64);
      Tensor start =
          layout.tp_loss ? layout.tp_loss(model->forward(ids), targets) : model->loss(ids, targets);
      if (const Tensor aux = model->auxiliary_loss(); aux.defined())
        start = ops::add(start, aux.to(start.dtype()));
      axes.before_backward(m == layout.grad_accum - 1);
      Tensor seed;
      {
        autograd::NoGradGuard no_grad;
        seed = ones(start.shape(), start.dtype());
      }
      autograd::backward({start}, {seed});
      axes.after_backward();
      if (hooks) hooks->end_backwards();
      if (scope && axes.gathers()) axes.set_low_precision(nullptr);
      copy_holds.scope = nullptr;
    }
    axes.sync();
  }
  return std::move(*record);
}

}  // namespace tessel::cli
