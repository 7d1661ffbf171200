// SPDX-License-Identifier: Apache-2.0
// The expert-parallel axis's hooks: the experts' gradient sums and scaling, their share of the
// global norm, and the step's all-to-all traffic.
#include "tessel/train/strategy/expert_parallel_strategy.h"

#include "tessel/dist/record.h"

namespace tessel::train {

ExpertParallelStrategy::ExpertParallelStrategy(models::CausalLM& model, dist::CommPtr ep,
                                               dist::CommPtr ep_dp, int dp_size, int zero_stage,
                                               int64_t bucket_bytes,
                                               const std::set<std::string>& trained, bool offloaded,
                                               bool overlap)
    : model_(model),
      ep_(std::move(ep)),
      ep_dp_(std::move(ep_dp)),
      dp_size_(dp_size),
      zero_stage_(zero_stage),
      overlap_(overlap && zero_stage < 3 && !offloaded) {
  TESSEL_CHECK(ep_ && dp_size_ % ep_->size() == 0, "expert parallel: ep ", ep_ ? ep_->size() : 0,
               " must divide dp ", dp_size_);
  TESSEL_CHECK(zero_stage_ >= 0 && zero_stage_ <= 3, "expert parallel: ZeRO stage ", zero_stage_,
               " for the experts is not supported (0, 1, 2 or 3)");
  split_ = parallel::parallelize_experts(model_, ep_);
  experts_.insert(split_.params.begin(), split_.params.end());
  for (const std::string& name : experts_)
    if (trained.empty() || trained.count(name)) trained_.insert(name);
  // A pipeline stage without MoE layers has no experts to partition (nor do its ep peers).
  if (trained_.empty()) return;
  std::vector<std::pair<std::string, Tensor>> params;
  for (const auto& [name, param] : model_.named_parameters())
    if (trained_.count(name)) params.emplace_back(name, param);
  parallel::DataParallelOptions options;
  options.bucket_bytes = bucket_bytes;
  options.overlap = overlap_;
  if (zero_stage_ == 0) {
    // Summed whole over ep_dp (then divided by dp); nothing to sum when dp == ep.
    if (!ep_dp_) return;
    options.average = false;
    sum_ = std::make_unique<parallel::DataParallel>(std::move(params), ep_dp_, options);
    return;
  }
  // dp == ep: every rank holds its experts alone, a group of one (split collectively over ep).
  zero_group_ = ep_dp_ ? ep_dp_ : ep_->split(ep_->rank(), 0, "ep_dp");
  options.reduction = zero_stage_ >= 2 ? parallel::GradReduction::ReduceScatter
                                       : parallel::GradReduction::AllReduce;
  // Offloaded: the reductions write the gradient shards in their chunks. ZeRO-1's all-reduced
  // buckets stay plain memory: the experts' are all filled by backward before the first of them
  // is reduced (sync_gradients), more than the device tier holds at once.
  options.allocate_gradient_shards = !offloaded;
  // Overlapped: no reduction is waited for during backward (the class comment says why); the
  // full buffers live until finish_gradient_sync either way.
  if (overlap_) options.max_pending_reductions = int64_t(1) << 30;
  std::vector<parallel::Zero3Unit> units;
  if (zero_stage_ == 3) {
    units = expert_zero3_units(model_, trained_);
    options.groups = parallel::zero3_groups(params, units);
  }
  ddp_ = std::make_unique<parallel::DataParallel>(std::move(params), zero_group_, options);
  if (zero_stage_ == 3) {
    parallel::Zero3Options zo;
    zo.copy_values = false;           // built shape-only: the trainer fills the shards
    zo.allocate_shards = !offloaded;  // offloaded: laid out in chunks, filled there
    zero3_ = std::make_unique<parallel::Zero3Parameters>(*ddp_, std::move(units), zo);
  }
}

std::vector<parallel::Zero3Unit> expert_zero3_units(nn::Module& model,
                                                    const std::set<std::string>& trained) {
  std::vector<parallel::Zero3Unit> units;
  for (auto& [name, module] : model.named_modules()) {
    auto* moe = dynamic_cast<nn::MoE*>(module);
    if (moe == nullptr) continue;
    parallel::Zero3Unit u{name + ".experts", moe, {}};
    const std::string prefix = (name.empty() ? "" : name + ".") + "experts.";
    for (const auto& [param, t] : moe->experts->named_parameters())
      if (trained.count(prefix + param)) u.params.push_back(prefix + param);
    if (!u.params.empty()) units.push_back(std::move(u));  // another stage's layer: not here
  }
  return units;
}

ExpertParallelStrategy::~ExpertParallelStrategy() = default;

std::string ExpertParallelStrategy::name() const {
  return "expert parallel (ep " + std::to_string(size()) + ")";
}

void ExpertParallelStrategy::begin_step() {
  issued_before_ = ep_->context().issued_count();
}

void ExpertParallelStrategy::before_backward(bool last) {
  // Overlapped with the last micro-batch's backward; otherwise all in sync_gradients (the class
  // comment says when and why).
  for (parallel::DataParallel* d : {ddp_.get(), sum_.get()})
    if (d) d->set_sync(last && overlap_);
}

void ExpertParallelStrategy::after_backward() {
  if (zero3_) zero3_->finish_backward();  // no expert stays gathered
}

void ExpertParallelStrategy::sync_gradients(StepRecord&) {
  launched_in_backward_ = 0;
  for (parallel::DataParallel* d : {ddp_.get(), sum_.get()})
    if (d && d->sync()) launched_in_backward_ += d->launched_count();
  if (ddp_) {
    // The average over ep_dp (dp / ep ranks) times 1 / ep: the sum over ep_dp divided by dp.
    ddp_->set_sync(true);
    ddp_->finish_gradient_sync();
    std::vector<GradSpan> spans;
    for (int64_t b = 0; b < ddp_->bucket_count(); ++b)
      spans.push_back(
          whole_span(zero_stage_ >= 2 ? ddp_->gradient_shard(b) : ddp_->bucket_gradients(b)));
    scale_spans(spans, 1.0 / double(size()), hold_);
    return;
  }
  const double scale = 1.0 / double(dp_size_);
  if (sum_) {  // every trained expert's gradient is in a bucket: the sums over ep_dp
    sum_->set_sync(true);
    sum_->finish_gradient_sync();
    std::vector<GradSpan> spans;
    for (int64_t b = 0; b < sum_->bucket_count(); ++b)
      spans.push_back(whole_span(sum_->bucket_gradients(b)));
    scale_spans(spans, scale);
    return;
  }
  for (const auto& [name, param] : model_.named_parameters()) {
    if (!trained_.count(name)) continue;
    Tensor g = param.grad();
    if (!g.defined()) {  // no row reached these experts on any micro-batch of this rank
      g = zeros(param.shape(), param.dtype());
      Tensor(param).set_grad(g);
    }
    scale_spans(std::vector<GradSpan>{whole_span(g)}, scale);
  }
}

void ExpertParallelStrategy::set_tensor_parallel(dist::CommPtr tp,
                                                 const ModelTensorParallel& split) {
  tp_ = std::move(tp);
  for (const std::string& name : experts_)
    if (model_tp_share(split, name) == TpShare::Piece) tp_split_.insert(name);
  // The ranks of a tp group hold the same tokens and route them alike, and every one of them
  // needs every row that reaches its ep rank: each its slice of every expert's columns (expert
  // tensor parallelism), or the whole experts, which it runs as its tp peers do (the rows, and so
  // the results, are those of every tp rank sending its own copy). Either way each tp rank sends
  // only its piece of the rows, and the bytes per rank divide by tp. Under sequence parallelism
  // without expert tensor parallelism the tp ranks route their own pieces instead, whose rows
  // differ: each sends its own (nn::Routing::piece), the split stays unused.
  if (tp_->size() > 1) parallel::split_expert_rows_over_tp(model_, tp_);
}

void ExpertParallelStrategy::describe_norm(GradNormPlan& plan) const {
  // Dense parameters are the same on every ep rank after the dp average (counted at ep rank 0);
  // each ep rank's experts are its own (their squares add over ep). Under ZeRO-2 the dp axis
  // adds every group's squares over dp, which covers the experts too: each of the dp = ep x ep_dp
  // ranks holds a different block of a different rank's experts. A tensor-parallel plan has
  // already made its groups (pieces, whole parameters): the experts become one more group, whole
  // on every tp rank (not summed over tp, so counted at tp rank 0 like any whole parameter).
  // Under expert tensor parallelism a second group holds the experts' FFN pieces, whose squares
  // add over tp as well (the output biases stay in the first: whole on every tp rank).
  const int experts = plan.groups, pieces = plan.groups + 1;
  plan.groups += 2;
  for (GradNormPlan::Axis& a : plan.axes) {
    if (a.sums.empty()) continue;
    a.sums.push_back(a.comm != tp_.get());
    a.sums.push_back(true);
  }
  for (GradSpan& s : plan.spans)
    if (experts_.count(s.param)) s.group = tp_split_.count(s.param) ? pieces : experts;
  if (zero_stage_ < 2) {
    std::vector<bool> sums(size_t(plan.groups), false);
    sums[size_t(experts)] = sums[size_t(pieces)] = true;
    plan.axes.push_back({ep_.get(), sums});
  }
}

void ExpertParallelStrategy::record(StepRecord& r) {
  dist::RankContext& ctx = ep_->context();
  const uint64_t issued = ctx.issued_count() - issued_before_;
  r.expert_parallel = true;
  for (parallel::DataParallel* d : {ddp_.get(), sum_.get()})
    if (d) r.expert_reductions += d->bucket_count();
  r.expert_reductions_in_backward = launched_in_backward_;
  r.all_to_all_calls = 0;
  double bytes = 0;
  for (const dist::Record& rec : ctx.recent(size_t(issued))) {
    if (rec.label_str() != ep_->label()) continue;
    if (rec.kind != dist::OpKind::AllToAll && rec.kind != dist::OpKind::AllToAllV) continue;
    ++r.all_to_all_calls;
    if (rec.has_tensor) bytes += double(rec.shape.numel() * int64_t(dtype_size(rec.dtype)));
  }
  // The bytes are summed over every rank (the ep group, then the groups, then the stages), as the
  // expert loads are. The calls are one data-parallel replica's over the whole model: every rank
  // of a stage issues the same exchanges, and each MoE layer exchanges on its own stage only, so
  // the stages' counts add (rank 0's alone would count its stage's layers only under pp).
  Tensor t = from_data(std::vector<double>{bytes}, Shape{1});
  ep_->all_reduce(t);
  if (ep_dp_) ep_dp_->all_reduce(t);
  if (tp_) tp_->all_reduce(t);  // each tp rank sends its piece of the rows
  bytes = t.to_vector<double>()[0];
  double calls = double(r.all_to_all_calls);
  if (pp_) {
    Tensor both = from_data(std::vector<double>{bytes, calls}, Shape{2});
    pp_->all_reduce(both);
    bytes = both.to_vector<double>()[0];
    calls = both.to_vector<double>()[1];
  }
  r.all_to_all_bytes = int64_t(bytes);
  r.all_to_all_calls = int64_t(calls);
}

sharding::LocalLayout ExpertParallelStrategy::placement(const std::string& param,
                                                        const Shape& local) const {
  for (size_t i = 0; i < split_.params.size(); ++i) {
    if (split_.params[i] != param) continue;
    sharding::ShardLayout spec;
    spec.dim = 0;
    spec.full = split_.experts[i];
    return sharding::LocalLayout::of(spec, local, size(), rank());
  }
  return sharding::LocalLayout::whole(local);
}

}  // namespace tessel::train
