// SPDX-License-Identifier: Apache-2.0
// A causal LM under tensor (and sequence) parallelism: the glue around parallel::parallelize that
// any model family needs (train/ may use both models and parallel, which models/ may not). The
// model's code is unchanged; the family supplies the plan and its sizes (ModelConfig::
// tensor_parallel, which also refuses shapes that cannot be split), and this file adds:
//  - the vocabulary: the family's vocab-parallel embedding is split by rows, padded to a multiple
//    of tp (Megatron-LM's padded vocabulary, announced in one line); the LM head multiplies with
//    the same rows, so the model's logits are this rank's vocabulary columns, and the loss is the
//    vocab-parallel cross-entropy, which leaves the padding columns out;
//  - layout-independent checkpoints: shards gathered to full tensors (model and AdamW moments),
//    and full tensors sliced back into shards;
//  - how each parameter is held over tp, for the global norm (sharded parameters summed over
//    ranks, replicated ones once) and, under sequence parallelism, the sum over tp of the
//    replicated parameters' gradients;
//  - replicated pieces (K and V heads when tp exceeds them): their gradients summed over the
//    ranks that hold each copy, counted and checkpointed once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/models/causal_lm.h"
#include "tessel/parallel/tensor/plan.h"
#include "tessel/train/optim/grad_norm.h"

namespace tessel::train {

struct ModelTensorParallel {
  dist::CommPtr tp;
  parallel::ParallelizeResult result;
  int64_t vocab = 0;         // real tokens
  int64_t padded_vocab = 0;  // a multiple of tp
  int64_t vocab_offset = 0;  // this rank's first vocabulary column
  bool sequence_parallel = false;
};

// Parallelizes `model` (full weights on every rank, as loaded or initialised) in place. `plan`
// empty: the family's built-in plan. `note` receives the one-line vocabulary padding notice.
// `copy_values` false: the model was built without values, which are filled after the cut
// (parallel::TpOptions::copy_values): the pieces are allocated, nothing is read.
ModelTensorParallel parallelize_model(models::CausalLM& model, dist::CommPtr tp,
                                      const std::string& plan_path, bool sequence_parallel,
                                      const std::function<void(const std::string&)>& note = {},
                                      bool copy_values = true);

// Mean cross-entropy of ids against targets (-100 ignored), as CausalLM::loss, from the
// vocab-split logits. Collective over tp.
Tensor model_tp_loss(models::CausalLM& model, const ModelTensorParallel& tp, const Tensor& ids,
                     const Tensor& targets);
// The same for evaluation (inference only), holding one chunk of positions' logits at a time
// (CausalLM::for_each_logits_chunk): each chunk's vocab-parallel mean (an f32 scalar), weighted by
// its counted targets and summed in double, so it equals model_tp_loss to within f32 rounding of
// the chunks' means, not bit for bit. Under sequence parallelism the ranks' pieces of the blocks'
// output are gathered first ([B, T, C]), then the head runs in chunks as without it.
// `positions` as in CausalLM::eval_loss (0: the byte bound).
Tensor model_tp_eval_loss(models::CausalLM& model, const ModelTensorParallel& tp, const Tensor& ids,
                          const Tensor& targets, int64_t positions = 0);

// Incremental decoding cannot split its one new token per step over the ranks: while this lives,
// sequence parallelism is paused and the model runs as plain tensor parallelism.
class SequenceParallelPause {
 public:
  explicit SequenceParallelPause(const ModelTensorParallel& tp) : state_(tp.result.sequence) {
    if (state_) state_->active = false;
  }
  ~SequenceParallelPause() {
    if (state_) state_->active = true;
  }
  SequenceParallelPause(const SequenceParallelPause&) = delete;
  SequenceParallelPause& operator=(const SequenceParallelPause&) = delete;

 private:
  std::shared_ptr<parallel::SequenceState> state_;
};

// [..., V_local] logits of this rank -> [..., vocab] on every rank (inference; collective).
Tensor model_tp_full_logits(const ModelTensorParallel& tp, const Tensor& local);

// Tensors named after parameters, possibly prefixed ("exp_avg.h.0.attn.c_attn.weight" with
// prefix "exp_avg."): gathered to full tensors. Names that are not sharded parameters pass
// through (cloned).
nn::NamedTensors model_tp_gather(const ModelTensorParallel& tp, const nn::NamedTensors& local);

// A full (unsharded) model holding the gathered weights, for writing checkpoints. Collective.
std::shared_ptr<models::CausalLM> model_tp_gather_model(models::CausalLM& model,
                                                        const ModelTensorParallel& tp);

// How this rank holds a parameter, for counting and writing it exactly once over tp.
enum class TpShare {
  Piece,       // its own rows, disjoint from the other ranks' (squares add over tp)
  Whole,       // the whole parameter, as every rank (counted on tp rank 0)
  SecondCopy,  // a replicated piece an earlier rank also holds (counted and written there)
};
TpShare model_tp_share(const ModelTensorParallel& tp, const std::string& name);

// Whether model_tp_reduce_gradients communicates (sequence parallelism or replicated pieces).
bool model_tp_sums_gradients(const ModelTensorParallel& tp);

// Under sequence parallelism: sums the replicated parameters' gradients over tp. Replicated
// pieces: sums each copy's gradient over the ranks holding it. One all-reduce each; nothing when
// neither applies (the gradients are then already complete on every rank). `hold`: the gradients
// live in offloaded chunks (docs/MEMORY.md): each is held while it is read, then while it is
// written back, one at a time, and the all-reduce works on a copy.
void model_tp_reduce_gradients(models::CausalLM& model, const ModelTensorParallel& tp,
                               const SpanHold& hold = {});

}  // namespace tessel::train
