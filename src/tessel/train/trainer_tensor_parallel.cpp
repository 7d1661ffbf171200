// SPDX-License-Identifier: Apache-2.0
// The trainer under tensor (and sequence) parallelism: the model parallelized by its plan after the
// full weights are loaded, the vocab-parallel loss, the gradient norm counted once over tp, the
// sequence-parallel gradient sums, and checkpoints gathered to full tensors (and sliced back on
// resume) so that any layout reads any other's checkpoints. Every tp rank reads the same batches:
// the loader's rank is the dp rank.
#include "tessel/train/optim/grad_clip.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

void Trainer::setup_tensor_parallel() {
  if (!layout_.tp) {
    if (config_.parallel.sequence_parallel)
      print("note: parallel.sequence_parallel has no effect without --tp > 1");
    return;
  }
  tp_ = std::make_unique<ModelTensorParallel>(parallelize_model(
      *model_, layout_.tp, config_.parallel.tp_plan, config_.parallel.sequence_parallel,
      [this](const std::string& line) { print("note: " + line); }));
  print("tensor parallel: tp = " + std::to_string(layout_.tp_size()) +
        (tp_->sequence_parallel ? " with sequence parallelism" : "") + ", " +
        std::to_string(tp_->result.applied.size()) + " modules parallelized, " +
        std::to_string(model_->model_config().num_heads() / layout_.tp_size()) + " of " +
        std::to_string(model_->model_config().num_heads()) + " heads per rank");
}

Tensor Trainer::compute_loss(const Tensor& ids, const Tensor& targets) {
  return tp_ ? model_tp_loss(*model_, *tp_, ids, targets) : model_->loss(ids, targets);
}

void Trainer::tp_after_backward() {
  if (tp_) model_tp_reduce_gradients(*model_, *tp_);
}

NamedTensors Trainer::tp_shard(const NamedTensors& full) const {
  return tp_ ? model_tp_shard(*tp_, full) : full;
}

}  // namespace tessel::train
