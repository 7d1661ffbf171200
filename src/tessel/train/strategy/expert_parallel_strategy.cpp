// SPDX-License-Identifier: Apache-2.0
// The expert-parallel axis's hooks: the experts' gradient sums and scaling, their share of the
// global norm, and the step's all-to-all traffic.
#include "tessel/train/strategy/expert_parallel_strategy.h"

#include "tessel/dist/record.h"

namespace tessel::train {

ExpertParallelStrategy::ExpertParallelStrategy(models::CausalLM& model, dist::CommPtr ep,
                                               dist::CommPtr ep_dp, int dp_size)
    : model_(model), ep_(std::move(ep)), ep_dp_(std::move(ep_dp)), dp_size_(dp_size) {
  TESSEL_CHECK(ep_ && dp_size_ % ep_->size() == 0, "expert parallel: ep ", ep_ ? ep_->size() : 0,
               " must divide dp ", dp_size_);
  split_ = parallel::parallelize_experts(model_, ep_);
  experts_.insert(split_.params.begin(), split_.params.end());
}

std::string ExpertParallelStrategy::name() const {
  return "expert parallel (ep " + std::to_string(size()) + ")";
}

void ExpertParallelStrategy::begin_step() {
  issued_before_ = ep_->context().issued_count();
}

void ExpertParallelStrategy::sync_gradients(StepRecord&) {
  const double scale = 1.0 / double(dp_size_);
  for (const auto& [name, param] : model_.named_parameters()) {
    if (!experts_.count(name)) continue;
    Tensor g = param.grad();
    if (!g.defined()) {  // no row reached these experts on any micro-batch of this rank
      g = zeros(param.shape(), param.dtype());
      Tensor(param).set_grad(g);
    }
    if (ep_dp_) ep_dp_->all_reduce(g);
    scale_spans(std::vector<GradSpan>{whole_span(g)}, scale);
  }
}

void ExpertParallelStrategy::describe_norm(GradNormPlan& plan) const {
  // Dense parameters are the same on every ep rank after the dp average (counted at ep rank 0);
  // each ep rank's experts are its own (their squares add over ep). A tensor-parallel plan has
  // already made groups: refused with ep, so one group is all there is.
  enum { kDense = 0, kExperts = 1 };
  plan.groups = 2;
  for (GradSpan& s : plan.spans) s.group = experts_.count(s.param) ? kExperts : kDense;
  plan.axes.push_back({ep_.get(), {false, true}});
}

void ExpertParallelStrategy::record(StepRecord& r) {
  dist::RankContext& ctx = ep_->context();
  const uint64_t issued = ctx.issued_count() - issued_before_;
  r.expert_parallel = true;
  r.all_to_all_calls = 0;
  double bytes = 0;
  for (const dist::Record& rec : ctx.recent(size_t(issued))) {
    if (rec.label_str() != ep_->label()) continue;
    if (rec.kind != dist::OpKind::AllToAll && rec.kind != dist::OpKind::AllToAllV) continue;
    ++r.all_to_all_calls;
    if (rec.has_tensor) bytes += double(rec.shape.numel() * int64_t(dtype_size(rec.dtype)));
  }
  // Summed over every rank (the ep group, then the groups), as the expert loads are.
  Tensor t = from_data(std::vector<double>{bytes}, Shape{1});
  ep_->all_reduce(t);
  if (ep_dp_) ep_dp_->all_reduce(t);
  r.all_to_all_bytes = int64_t(t.to_vector<double>()[0]);
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
