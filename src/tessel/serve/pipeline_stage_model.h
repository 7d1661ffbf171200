// SPDX-License-Identifier: Apache-2.0
// One pipeline stage of a model for `tessel generate --pp N` and `tessel serve --pp N` (GPipe,
// Huang et al. 2019, applied to inference as in EnergonAI, Li et al. 2022): rank r holds blocks
// [first_r, last_r) of the model (the first rank the embedding too, the last one the final norm
// and the LM head), a KV cache of its own blocks only, and runs its part of every forward. It
// presents itself as a CausalLM, so the serving engine, its followers (serve/step_mirror.h: rank 0
// decides every step and broadcasts it, so every rank's block tables agree) and the generation loop
// drive it unchanged.
//
// One forward: rank 0 embeds and runs its blocks, sends the hidden states to rank 1, and so on; the
// last rank turns them into logits and sends them back (to rank 0, or to every rank when each runs
// the same generation loop). An engine step of several sequences is cut into up to M micro-batches
// of whole sequences, balanced by tokens, that flow through the stages one after the other: stage r
// works on micro-batch m while stage r + 1 works on m - 1, so a step of P stages takes about
// (M + P - 1) / M stage-times instead of P (the GPipe bubble) when a piece costs 1/M of the step.
// That holds for long prompt chunks; a decode step's products are bound by reading the weights,
// which every piece reads again, so there M = 1 is faster (docs/SERVING.md has the figures).
// The stages wait for each other by polling, not in MPI's spinning blocking calls, so that a
// waiting stage leaves the core to a computing one where they share cores. Attention never
// crosses sequences and the other layers work row by row, so the logits equal one process's
// (bitwise under --deterministic, whose kernels do not depend on the batch's size).
//
// Rank 0 can also start a forward and collect its logits later (serve/pipelined_forward.h), so
// that the engine keeps one step of each group of requests in flight: while the last stage
// computes group A's step, the first computes group B's, across steps instead of within one.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/models/causal_lm.h"
#include "tessel/models/staged_decode.h"
#include "tessel/serve/pipelined_forward.h"

namespace tessel::serve {

class PipelineStageModel final : public models::CausalLM, public PipelinedForward {
 public:
  enum class LogitsTo { kFirstRank, kEveryRank };

  // `model` holds (at least) this rank's weights and implements models::StagedDecode;
  // `stage_first` has P + 1 entries, the first block of each stage and then the model's block
  // count (stage r runs [stage_first[r], stage_first[r + 1]), non-empty); the group's rank r runs
  // stage r. `microbatches` >= 1. Under tensor parallelism inside each stage (--tp with --pp)
  // `model` is this rank's share, `group` links the ranks of the same tensor-parallel index
  // across the stages, and `full_logits` turns the last stage's vocabulary-split logits into
  // whole rows (collective over that stage's tensor-parallel group).
  using FullLogits = std::function<Tensor(const Tensor&)>;
  PipelineStageModel(std::shared_ptr<models::CausalLM> model, dist::CommPtr group,
                     std::vector<int64_t> stage_first, int microbatches, LogitsTo logits_to,
                     FullLogits full_logits = {});

  int stage() const { return group_->rank(); }
  int stages() const { return group_->size(); }
  int64_t first_block() const { return first_; }
  int64_t last_block() const { return last_; }
  bool first_stage() const { return stage() == 0; }
  bool last_stage() const { return stage() == stages() - 1; }
  // Forward passes and micro-batches run so far (for the bubble figures).
  int64_t microbatches_run() const { return microbatches_run_; }

  const models::ModelConfig& model_config() const override { return inner_->model_config(); }

  // Collective over the group: every rank calls it with the same ids, rows and cache positions
  // (a DecodeCache over this stage's blocks). The logits ([R, V] with rows, else [B, T, V], f32)
  // are returned on rank 0, or on every rank with LogitsTo::kEveryRank; the other ranks return an
  // empty [0, V] tensor.
  Tensor forward_cached(const Tensor& ids, models::DecodeCache& cache,
                        const Tensor& rows = Tensor()) override;
  // Rank 0 with LogitsTo::kFirstRank only: forward_cached in two halves. begin_forward runs this
  // stage and posts the receive of the logits; end_forward waits for them. The other ranks run
  // forward_cached for each step in the same order (the logits of successive steps arrive in the
  // order their receives were posted).
  int64_t begin_forward(const Tensor& ids, models::DecodeCache& cache, const Tensor& rows) override;
  Tensor end_forward(int64_t ticket) override;
  // A cache of this stage's blocks only.
  models::KVCache make_cache(int64_t batch, int64_t capacity = 0) const override;

  // A stage is not a whole model: the training-side layering is refused.
  Tensor embed(const Tensor& ids) override;
  Tensor block(int64_t index, const Tensor& hidden) override;
  Tensor head(const Tensor& hidden) override;
  int64_t layer_of_parameter(const std::string& name) const override;
  std::vector<std::string> head_tied_parameters() const override;
  std::vector<std::string> unit_paths() const override;
  std::vector<double> layer_costs() const override;
  void set_recompute(nn::Recompute mode) override;
  void set_block_recompute(int64_t index, nn::Recompute mode) override;
  nn::Recompute recompute() const override;

  static constexpr int kHiddenTag = 7401, kLogitsTag = 7402;

 private:
  // A forward begun on rank 0 whose logits have not been collected.
  struct Pending {
    Shape shape;
    Tensor logits;
    dist::WorkPtr receive;  // null when no row samples
  };

  // This stage's part of a step, cut into micro-batches: the last stage's logits, else undefined.
  Tensor run_step(const Tensor& ids, models::DecodeCache& cache, const Tensor& rows);
  Shape logits_shape(const Tensor& ids, const Tensor& rows) const;
  // This stage's part of one (micro-)batch: ids -> hidden -> ... -> logits.
  Tensor run_stage(const Tensor& ids, models::DecodeCache& cache, const Tensor& rows);
  Tensor deliver_logits(Tensor logits, const Shape& shape);

  std::shared_ptr<models::CausalLM> inner_;
  models::StagedDecode* staged_ = nullptr;
  dist::CommPtr group_;
  std::vector<int64_t> stage_first_;
  int64_t first_ = 0, last_ = 0;
  int microbatches_ = 1;
  LogitsTo logits_to_;
  FullLogits full_logits_;
  DType hidden_dtype_ = DType::F32;
  int64_t microbatches_run_ = 0;
  std::deque<Pending> pending_;
  int64_t next_ticket_ = 0;  // the ticket of pending_.back() + 1
};

}  // namespace tessel::serve
