// SPDX-License-Identifier: Apache-2.0
// The tensor-parallel axis's hooks.
#include "tessel/train/strategy/tensor_parallel_strategy.h"

#include "tessel/parallel/expert/expert_tensor_parallel.h"

namespace tessel::train {

TensorParallelStrategy::TensorParallelStrategy(models::CausalLM& model, dist::CommPtr tp,
                                               const std::string& plan_path, bool sequence_parallel,
                                               const std::function<void(const std::string&)>& note,
                                               bool copy_values, bool expert_tensor_parallel)
    : model_(model),
      tp_(parallelize_model(model, std::move(tp), plan_path, sequence_parallel, note,
                            copy_values)) {
  if (!expert_tensor_parallel) return;
  // The plan left the MoE layers whole; their experts' pieces are tp pieces like the plan's for
  // the norm, the gradient sums and checkpoints (model_tp_share, checkpoint placement).
  parallel::ExpertTensorParallelResult split = parallel::parallelize_expert_ffn(model_, tp_.tp);
  for (auto& entry : split.sharded) tp_.result.sharded.push_back(std::move(entry));
  expert_layers_ = split.layers;
}

std::string TensorParallelStrategy::name() const {
  return "tensor parallel (tp " + std::to_string(size()) +
         (tp_.sequence_parallel ? ", sequence parallel" : "") + ")";
}

Tensor TensorParallelStrategy::loss(const Tensor& ids, const Tensor& targets) {
  return model_tp_loss(model_, tp_, ids, targets);
}

void TensorParallelStrategy::sync_gradients(StepRecord&) {
  model_tp_reduce_gradients(model_, tp_, hold_);
}

void TensorParallelStrategy::describe_norm(GradNormPlan& plan) const {
  describe_tensor_parallel_norm(tp_, plan);
}

void describe_tensor_parallel_norm(const ModelTensorParallel& tp, GradNormPlan& plan) {
  enum { kPiece = 0, kWhole = 1 };
  plan.groups = 2;
  std::erase_if(plan.spans, [&](const GradSpan& s) {
    return model_tp_share(tp, s.param) == TpShare::SecondCopy;
  });
  for (GradSpan& s : plan.spans)
    s.group = model_tp_share(tp, s.param) == TpShare::Piece ? kPiece : kWhole;
  plan.axes.push_back({tp.tp.get(), {true, false}});
}

}  // namespace tessel::train
