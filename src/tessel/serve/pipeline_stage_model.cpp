// SPDX-License-Identifier: Apache-2.0
// One pipeline stage's forward: receive, run its blocks, send on; micro-batches of whole
// sequences overlap the stages (pipeline_stage_model.h).
#include "tessel/serve/pipeline_stage_model.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/serve/paged_kv_cache.h"
#include "tessel/serve/step_microbatches.h"

namespace tessel::serve {
namespace {

// Waits for a receive by testing it, briefly back to back and then with sleeps of 20 us growing to
// 1 ms, instead of in a blocking receive: MPI's blocking calls spin a core, and a stage spends
// (P - 1) / P of a step waiting for the others; where ranks share cores (more ranks than cores,
// or other jobs) that spin takes the core the computing stage needs.
void wait_politely(const dist::WorkPtr& work) {
  for (int i = 0; i < 64; ++i)
    if (work->test()) return;
  auto pause = std::chrono::microseconds(20);
  while (!work->test()) {
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
}

}  // namespace

PipelineStageModel::PipelineStageModel(std::shared_ptr<models::CausalLM> model, dist::CommPtr group,
                                       std::vector<int64_t> stage_first, int microbatches,
                                       LogitsTo logits_to, FullLogits full_logits)
    : CausalLM("PipelineStage"),
      inner_(std::move(model)),
      group_(std::move(group)),
      stage_first_(std::move(stage_first)),
      microbatches_(microbatches),
      logits_to_(logits_to),
      full_logits_(std::move(full_logits)) {
  TESSEL_CHECK(inner_ != nullptr && group_ != nullptr, "PipelineStageModel: no model or no group");
  staged_ = dynamic_cast<models::StagedDecode*>(inner_.get());
  TESSEL_CHECK(staged_ != nullptr, "PipelineStageModel: ", inner_->type_name(),
               " cannot run as pipeline stages (no staged decoding)");
  const int64_t blocks = inner_->num_layers();
  TESSEL_CHECK(int64_t(stage_first_.size()) == group_->size() + 1 && stage_first_.front() == 0 &&
                   stage_first_.back() == blocks,
               "PipelineStageModel: ", stage_first_.size(), " stage bounds for ", group_->size(),
               " ranks and ", blocks, " blocks");
  for (size_t s = 0; s + 1 < stage_first_.size(); ++s)
    TESSEL_CHECK(stage_first_[s] < stage_first_[s + 1], "PipelineStageModel: stage ", s,
                 " has no block (first ", stage_first_[s], ", next ", stage_first_[s + 1], ")");
  TESSEL_CHECK(microbatches_ >= 1, "PipelineStageModel: ", microbatches_,
               " micro-batches, expected >= 1");
  first_ = stage_first_[size_t(stage())];
  last_ = stage_first_[size_t(stage()) + 1];
  hidden_dtype_ = inner_->make_cache(1, 1).dtype();
  register_module("stage", inner_);
}

models::KVCache PipelineStageModel::make_cache(int64_t batch, int64_t capacity) const {
  const models::KVCache whole = inner_->make_cache(1, 1);
  if (capacity == 0) capacity = model_config().max_positions();
  return models::KVCache(last_ - first_, batch, capacity, whole.kv_heads(), whole.head_dim(),
                         whole.dtype());
}

Tensor PipelineStageModel::run_stage(const Tensor& ids, models::DecodeCache& cache,
                                     const Tensor& rows) {
  const int64_t b = ids.size(0), t = ids.size(1);
  Tensor input = ids;
  if (!first_stage()) {
    input = empty({b, t, model_config().hidden_size()}, hidden_dtype_);
    wait_politely(group_->recv_async(input, stage() - 1, kHiddenTag));
  }
  Tensor hidden = staged_->forward_cached_layers(first_, last_, input, cache);
  ++microbatches_run_;
  if (!last_stage()) {
    // Completed before the next micro-batch: a large message moves only while MPI is called
    // (rendezvous), so an unwaited send would sit until this stage finished its next piece, and the
    // next stage, already waiting for it, would idle meanwhile.
    wait_politely(group_->send_async(hidden, stage() + 1, kHiddenTag));
    return Tensor();
  }
  if (rows.defined() && rows.numel() == 0) return Tensor();  // nothing of it samples
  Tensor logits = staged_->cached_head(hidden, rows);
  if (full_logits_) logits = full_logits_(logits).clone();  // (a slice when the vocab is padded)
  return logits.to(DType::F32);
}

Shape PipelineStageModel::logits_shape(const Tensor& ids, const Tensor& rows) const {
  TESSEL_CHECK(ids.ndim() == 2, "PipelineStageModel.forward_cached: ids ", ids.shape(),
               " expected [B, T]");
  const int64_t vocab = model_config().vocabulary_size();
  return rows.defined() ? Shape{rows.numel(), vocab} : Shape{ids.size(0), ids.size(1), vocab};
}

Tensor PipelineStageModel::run_step(const Tensor& ids, models::DecodeCache& cache,
                                    const Tensor& rows) {
  auto* paged = dynamic_cast<PagedStep*>(&cache);
  if (paged == nullptr || microbatches_ <= 1) return run_stage(ids, cache, rows);
  std::vector<Tensor> pieces;
  for (StepTensors& part : split_step(paged->tensors(), microbatches_)) {
    PagedStep piece(paged->pool(), std::move(part));
    Tensor l = run_stage(piece.ids(), piece, piece.sample_rows());
    if (l.defined()) pieces.push_back(l);
  }
  if (last_stage() && !pieces.empty()) return concat(std::span<const Tensor>(pieces), 0);
  return Tensor();
}

Tensor PipelineStageModel::forward_cached(const Tensor& ids, models::DecodeCache& cache,
                                          const Tensor& rows) {
  const Shape shape = logits_shape(ids, rows);
  autograd::NoGradGuard no_grad;
  Tensor logits = run_step(ids, cache, rows);
  return deliver_logits(std::move(logits), shape);
}

int64_t PipelineStageModel::begin_forward(const Tensor& ids, models::DecodeCache& cache,
                                          const Tensor& rows) {
  TESSEL_CHECK(first_stage() && !last_stage() && logits_to_ == LogitsTo::kFirstRank,
               "PipelineStageModel.begin_forward: on stage ", stage(), " of ", stages(),
               " (only the first of several stages, receiving the logits alone, starts "
               "forwards it finishes later)");
  const Shape shape = logits_shape(ids, rows);
  autograd::NoGradGuard no_grad;
  // Posted before this stage computes, so the last stage's send never waits for it (its logits
  // may be a rendezvous-sized message) while this rank is busy with a later step.
  Pending p;
  p.shape = shape;
  p.logits = empty(shape, DType::F32);
  if (shape.numel() > 0) p.receive = group_->recv_async(p.logits, stages() - 1, kLogitsTag);
  pending_.push_back(std::move(p));
  run_step(ids, cache, rows);
  return next_ticket_++;
}

Tensor PipelineStageModel::end_forward(int64_t ticket) {
  const int64_t oldest = next_ticket_ - int64_t(pending_.size());
  TESSEL_CHECK(!pending_.empty() && ticket == oldest, "PipelineStageModel.end_forward: ticket ",
               ticket, ", expected the oldest unfinished one, ",
               pending_.empty() ? std::string("none") : std::to_string(oldest));
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  if (p.receive) wait_politely(p.receive);
  return p.logits;
}

Tensor PipelineStageModel::deliver_logits(Tensor logits, const Shape& shape) {
  const bool wanted = first_stage() || logits_to_ == LogitsTo::kEveryRank;
  // What a rank without the logits returns: no rows (the engine's followers pass it on).
  const Tensor none = empty({0, shape[shape.ndim() - 1]}, DType::F32);
  if (shape.numel() == 0) return wanted ? empty(shape, DType::F32) : none;
  if (last_stage()) {
    TESSEL_CHECK(logits.defined() && logits.numel() == shape.numel(),
                 "PipelineStageModel: the last stage's logits ",
                 logits.defined() ? logits.shape() : Shape{}, " expected ", shape);
    logits = logits.reshape(shape);
  }
  if (stages() == 1) return logits;
  if (logits_to_ == LogitsTo::kEveryRank) {
    Tensor out = last_stage() ? logits : empty(shape, DType::F32);
    group_->broadcast(out, stages() - 1);
    return out;
  }
  if (last_stage()) {
    // Waited for politely too: with groups of requests in flight (pipelined_forward.h) rank 0 is
    // computing the next group's first stage when these logits are ready, and a large message
    // moves only once it calls MPI again; a blocking send would spin this rank's core meanwhile.
    wait_politely(group_->send_async(logits, 0, kLogitsTag));
    return none;
  }
  if (!first_stage()) return none;
  Tensor out = empty(shape, DType::F32);
  wait_politely(group_->recv_async(out, stages() - 1, kLogitsTag));
  return out;
}

namespace {
[[noreturn]] void not_whole(const char* what) {
  throw Error(detail::concat("PipelineStageModel.", what,
                             ": a pipeline stage is not a whole model (decoding only)"));
}
}  // namespace

Tensor PipelineStageModel::embed(const Tensor&) {
  not_whole("embed");
}
Tensor PipelineStageModel::block(int64_t, const Tensor&) {
  not_whole("block");
}
Tensor PipelineStageModel::head(const Tensor&) {
  not_whole("head");
}
int64_t PipelineStageModel::layer_of_parameter(const std::string& name) const {
  return inner_->layer_of_parameter(name);
}
std::vector<std::string> PipelineStageModel::head_tied_parameters() const {
  return inner_->head_tied_parameters();
}
std::vector<std::string> PipelineStageModel::unit_paths() const {
  return inner_->unit_paths();
}
std::vector<double> PipelineStageModel::layer_costs() const {
  return inner_->layer_costs();
}
void PipelineStageModel::set_recompute(nn::Recompute mode) {
  inner_->set_recompute(mode);
}

void PipelineStageModel::set_block_recompute(int64_t index, nn::Recompute mode) {
  inner_->set_block_recompute(index, mode);
}
nn::Recompute PipelineStageModel::recompute() const {
  return inner_->recompute();
}

}  // namespace tessel::serve
