// SPDX-License-Identifier: Apache-2.0
// The data-parallel axis's hooks: which backward synchronises, ZeRO-3's release after each, the
// wait for the averages, the norm over shards, and the count of the step's dp collectives.
#include "tessel/train/strategy/data_parallel_strategy.h"

#include "tessel/dist/record.h"

namespace tessel::train {

DataParallelStrategy::DataParallelStrategy(const nn::NamedTensors& params, dist::CommPtr dp,
                                           DataParallelSetup setup)
    : comm_(std::move(dp)), stage_(setup.zero_stage), after_other_sums_(setup.after_other_sums) {
  parallel::DataParallelOptions options = setup.options;
  options.reduction =
      stage_ >= 2 ? parallel::GradReduction::ReduceScatter : parallel::GradReduction::AllReduce;
  if (stage_ == 3) options.groups = parallel::zero3_groups(params, setup.units);
  ddp_ = std::make_unique<parallel::DataParallel>(params, comm_, options);
  if (setup.broadcast) ddp_->broadcast_parameters(0);  // before ZeRO-3 keeps only shards
  if (stage_ == 3) {
    parallel::Zero3Options zo;
    zo.copy_values = setup.copy_values;
    zo.allocate_shards = setup.allocate_shards;
    zero3_ = std::make_unique<parallel::Zero3Parameters>(*ddp_, std::move(setup.units), zo);
  }
}

DataParallelStrategy::~DataParallelStrategy() = default;

std::string DataParallelStrategy::name() const {
  return "data parallel (dp " + std::to_string(size()) +
         (stage_ > 0 ? ", ZeRO-" + std::to_string(stage_) : std::string()) + ")";
}

void DataParallelStrategy::begin_step() {
  issued_before_ = comm_->context().issued_count();
  if (zero3_) zero3_->reset_peak();
}

void DataParallelStrategy::before_backward(bool last) {
  // Only the last micro-batch communicates, overlapped with its backward.
  ddp_->set_sync(last && !after_other_sums_);
}

void DataParallelStrategy::after_backward() {
  if (zero3_) zero3_->finish_backward();  // no parameter stays gathered
}

void DataParallelStrategy::sync_gradients(StepRecord& r) {
  ddp_->set_sync(true);
  ddp_->finish_gradient_sync();
  r.comm_wait_ms = ddp_->last_stats().wait_ms;
}

void DataParallelStrategy::describe_norm(GradNormPlan& plan) const {
  // From stage 2 each rank holds its own shard of every bucket: the squares add over dp.
  if (stage_ >= 2) plan.axes.push_back({comm_.get(), {}});
}

void DataParallelStrategy::record(StepRecord& r) {
  dist::RankContext& ctx = comm_->context();
  const uint64_t issued = ctx.issued_count() - issued_before_;
  // The recorder is a ring: a step that issued more than it holds is counted in part.
  for (const dist::Record& rec : ctx.recent(size_t(issued))) {
    if (rec.label_str() != comm_->label() || !dist::is_collective(rec.kind)) continue;
    ++r.collectives[std::string(dist::op_kind_name(rec.kind))];
    if (rec.has_tensor) r.collective_bytes += rec.shape.numel() * int64_t(dtype_size(rec.dtype));
  }
}

std::shared_ptr<void> zero3_gather_all(parallel::Zero3Parameters* zero3) {
  if (!zero3 || zero3->pinned()) return nullptr;
  zero3->gather_all();
  return std::shared_ptr<void>(
      zero3, [](void* p) { static_cast<parallel::Zero3Parameters*>(p)->release_all(); });
}

std::shared_ptr<void> zero3_gather_unit(parallel::Zero3Parameters* zero3, const std::string& unit) {
  if (!zero3 || zero3->pinned()) return nullptr;
  for (size_t k = 0; k < zero3->unit_count(); ++k) {
    if (zero3->unit_name(k) != unit) continue;
    zero3->gather(k);
    return std::shared_ptr<void>(
        zero3, [k](void* p) { static_cast<parallel::Zero3Parameters*>(p)->release(k); });
  }
  return nullptr;
}

}  // namespace tessel::train
