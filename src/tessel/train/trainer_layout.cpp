// SPDX-License-Identifier: Apache-2.0
// The trainer on a composed layout: data x tensor x pipeline parallelism with ZeRO on one mesh
// (the 3D parallelism of Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", SC 2021, with ZeRO over the dp axis). Each axis keeps its own code;
// what lives here is where they meet:
//  - tensor parallelism inside pipeline stages: the last stage's vocab-parallel loss, and under
//    sequence parallelism the pipeline messages carry this rank's sequence piece (the p2p peer is
//    the same tp coordinate of the adjacent stage, which the mesh's pp communicator connects);
//  - ZeRO on a tensor-parallel rank's shards (they are plain local parameters to dp), and ZeRO-3
//    units restricted to a pipeline stage's parameters;
//  - one global gradient norm in which every element counts once: tp-sharded parameters summed
//    over tp, replicated ones once, ZeRO shards summed over dp, stages summed over pp (the tied
//    wte is trained, and so counted, by the first stage only);
//  - the per-step breakdown: compute, exposed communication per axis, pipeline bubble.
#include <chrono>
#include <cmath>
#include <set>

#include "tessel/dist/comm_time.h"
#include "tessel/parallel/tensor/vocab_parallel.h"
#include "tessel/sharding/placement.h"
#include "tessel/train/optim/grad_norm.h"
#include "tessel/train/pipeline_stage.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

namespace {

using Clock = std::chrono::steady_clock;

double now_ms() {
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

}  // namespace

double Trainer::tp_blocking_ms() const {
  return layout_.tp ? dist::blocking_ms(layout_.tp->label()) : 0.0;
}

double Trainer::dp_blocking_ms() const {
  return dp_ ? dist::blocking_ms(dp_->label()) : 0.0;
}

int64_t Trainer::layout_stage_seq_len() const {
  const int64_t t = config_.train.seq_len;
  if (!tp_ || !tp_->sequence_parallel) return t;
  return sharding::shard_size(t, layout_.tp_size(), layout_.tp_rank());
}

void Trainer::layout_setup_pipeline() {
  if (!tp_) return;
  ModelTensorParallel* tp = tp_.get();
  pipe_->stages->set_loss([tp](const Tensor& logits, const Tensor& targets) {
    return parallel::vocab_parallel_cross_entropy(logits, targets, *tp->tp, tp->vocab,
                                                  tp->vocab_offset);
  });
  // Later stages never run the embedding that records the full sequence length, which the
  // gathers of their sequence pieces need.
  if (tp_->result.sequence) tp_->result.sequence->length = config_.train.seq_len;
}

std::vector<parallel::Zero3Unit> Trainer::layout_zero3_units(
    std::vector<parallel::Zero3Unit> units) {
  if (!pipe_) return units;
  std::set<std::string> own;
  for (const auto& [name, param] : trainable_parameters()) own.insert(name);
  std::vector<parallel::Zero3Unit> out;
  for (parallel::Zero3Unit& u : units) {
    std::erase_if(u.params, [&](const std::string& p) { return !own.count(p); });
    if (u.params.empty()) continue;
    // A stage never runs the root's forward: the embeddings' own modules carry the hooks.
    if (u.module == model_.get()) {
      TESSEL_CHECK(u.params.size() == 1 && model_->layer_of_parameter(u.params[0]) == 0,
                   "train: parallel.zero_stage 3 with pp: parameter '", u.params[0],
                   "' belongs to no module a pipeline stage runs (an untied LM head is not "
                   "supported with pp and ZeRO-3)");
      u.module = owner_module(*model_, u.params[0]);
    }
    out.push_back(std::move(u));
  }
  return out;
}

bool Trainer::layout_defers_dp_sync() const {
  // ZeRO-2/3 keep only shards of the averaged gradients, so the sums over tp (the replicated
  // parameters' sequence-piece gradients, the copies of replicated K/V heads) must come first:
  // dp then reduces after backward.
  return tp_ && model_tp_sums_gradients(*tp_) && ddp_ && config_.parallel.zero_stage >= 2;
}

void Trainer::layout_sync_gradients(StepRecord& r) {
  layout_fb_ms_ = now_ms() - layout_step_start_ms_;
  layout_tp_fb_ms_ = tp_blocking_ms() - layout_tp_start_ms_;
  if (zero3_ && pipe_) zero3_->finish_backward();  // the stages' micro-batches all ran
  const bool deferred = layout_defers_dp_sync();
  if (deferred) tp_after_backward();
  if (ddp_) {
    ddp_->set_sync(true);
    ddp_->finish_gradient_sync();
    r.comm_wait_ms = ddp_->last_stats().wait_ms;
  }
  if (!deferred) tp_after_backward();
}

double Trainer::layout_grad_square_sum() {
  // Groups under tp: 0, pieces over tp (their squares add over tp); 1, whole on every tp rank
  // (counted at tp rank 0). Second copies of replicated pieces are left out: the first copy
  // counts. Without tp one group: one value travels per axis.
  enum { kPiece = 0, kWhole = 1 };
  const int groups = tp_ ? 2 : 1;
  const auto group = [&](const std::string& name) -> int {
    if (!tp_) return 0;
    switch (model_tp_share(*tp_, name)) {
      case TpShare::Piece:
        return kPiece;
      case TpShare::Whole:
        return kWhole;
      case TpShare::SecondCopy:
        return -1;
    }
    return kWhole;
  };
  std::vector<GradSpan> spans;
  const int stage = zero_ ? zero_->stage() : 0;
  if (zero_) {
    for (const parallel::DataParallel::Place& p : ddp_->places()) {
      const int g = group(p.name);
      if (g < 0) continue;
      const int64_t n = p.param.numel();
      if (stage == 1) {  // the full average on every dp rank
        spans.push_back({ddp_->bucket_gradients(p.bucket), p.offset, p.offset + n, g});
        continue;
      }
      const int64_t size = ddp_->shard_numel(p.bucket);
      const int64_t lo = int64_t(layout_.dp_rank()) * size;
      const int64_t begin = std::max(lo, p.offset), end = std::min(lo + size, p.offset + n);
      if (begin < end) spans.push_back({ddp_->gradient_shard(p.bucket), begin - lo, end - lo, g});
    }
  } else {
    for (const auto& [name, param] : trainable_parameters()) {
      const int g = group(name);
      if (g >= 0 && param.grad().defined()) spans.push_back(whole_span(param.grad(), g));
    }
  }
  std::vector<NormAxis> axes;
  const std::vector<bool> all(size_t(groups), true);
  if (stage >= 2) axes.push_back({dp_.get(), all});  // each dp rank holds a shard
  if (tp_) axes.push_back({layout_.tp.get(), {true, false}});
  if (layout_.pp) axes.push_back({layout_.pp.get(), all});  // disjoint stages
  const GlobalSquareSum sum = global_square_sum(spans, groups, axes);
  // fp16 agrees on overflows over every axis from this (the norm leaves some ranks' parts out).
  layout_local_nonfinite_ = sum.local_nonfinite;
  return sum.total;
}

std::shared_ptr<void> Trainer::layout_gather_all() {
  if (!zero3_ || zero3_->pinned()) return nullptr;
  zero3_->gather_all();
  parallel::Zero3Parameters* z = zero3_.get();
  return std::shared_ptr<void>(
      z, [](void* p) { static_cast<parallel::Zero3Parameters*>(p)->release_all(); });
}

std::shared_ptr<void> Trainer::layout_gather_tied() {
  if (!zero3_ || zero3_->pinned() || pipe_->tied.empty()) return nullptr;
  for (size_t k = 0; k < zero3_->unit_count(); ++k) {
    if (zero3_->unit_name(k) != pipe_->tied.front()) continue;
    zero3_->gather(k);
    parallel::Zero3Parameters* z = zero3_.get();
    return std::shared_ptr<void>(
        z, [k](void* p) { static_cast<parallel::Zero3Parameters*>(p)->release(k); });
  }
  return nullptr;
}

void Trainer::layout_begin_step() {
  layout_step_start_ms_ = now_ms();
  layout_tp_start_ms_ = tp_blocking_ms();
  layout_dp_start_ms_ = dp_blocking_ms();
}

// The slowest rank's figures (a max over every axis), so that rank 0 reports the grid. Compute is
// the forward + backward (the pipeline's compute actions under pp) less the blocking tp
// collectives inside it; tp is every blocking tp call of the step (in the layers, the
// sequence-parallel sums, the norm).
void Trainer::layout_breakdown(StepRecord& r) {
  const double tp_ms = tp_blocking_ms() - layout_tp_start_ms_;
  // dp: the wait for the overlapped gradient reduction, and every blocking dp call (ZeRO's
  // parameter all-gathers, the norm, the loss mean).
  const double dp_ms = r.comm_wait_ms + dp_blocking_ms() - layout_dp_start_ms_;
  double bubble = 0, compute = layout_fb_ms_;
  if (pipe_ && pipe_->last) {
    compute = pipe_->last->compute_ms;
    bubble = std::max(0.0, pipe_->last->makespan_ms - compute);
  }
  compute = std::max(0.0, compute - layout_tp_fb_ms_);
  Tensor t = from_data(std::vector<double>{compute, dp_ms, tp_ms, bubble}, {4});
  for (const dist::CommPtr& axis : {layout_.dp, layout_.tp, layout_.pp})
    if (axis) axis->all_reduce(t, dist::ReduceOp::Max);
  const double* v = t.data<double>();
  r.compute_ms = v[0];
  r.dp_comm_ms = v[1];
  r.tp_comm_ms = v[2];
  r.pp_bubble_ms = v[3];
}

}  // namespace tessel::train
