// SPDX-License-Identifier: Apache-2.0
// Tensor (and sequence) parallelism as a strategy of the step (Shoeybi et al., Megatron-LM 2019;
// Korthikanti et al. 2022 for sequence parallelism): the model parallelized by its family's plan
// (train/model_tensor_parallel.h does the model side: vocabulary, checkpoints, replicated K/V);
// here, the vocab-parallel loss, the gradient sums over tp after backward, and how tp shares each
// parameter in the global norm (pieces add over tp, whole copies count once).
#pragma once

#include <functional>
#include <string>

#include "tessel/train/model_tensor_parallel.h"
#include "tessel/train/strategy/axis_strategy.h"

namespace tessel::train {

class TensorParallelStrategy : public AxisStrategy {
 public:
  // Parallelizes `model` in place (full weights on every rank). `plan_path` empty: the family's
  // plan. `note` receives the one-line notices (vocabulary padding). `copy_values` false: the
  // model holds no values yet; the caller fills the pieces (parallelize_model).
  // `expert_tensor_parallel`: also split each MoE expert's FFN over tp
  // (parallel/expert/expert_tensor_parallel.h); its pieces join the plan's in model_tp().result.
  TensorParallelStrategy(models::CausalLM& model, dist::CommPtr tp, const std::string& plan_path,
                         bool sequence_parallel,
                         const std::function<void(const std::string&)>& note,
                         bool copy_values = true, bool expert_tensor_parallel = false);

  std::string name() const override;
  void sync_gradients(StepRecord& record) override;
  void describe_norm(GradNormPlan& plan) const override;

  // The mean cross-entropy from this rank's vocabulary columns (collective over tp).
  Tensor loss(const Tensor& ids, const Tensor& targets);
  // Whether sync_gradients communicates (sequence parallelism or replicated pieces).
  bool sums_gradients() const { return model_tp_sums_gradients(tp_); }
  const ModelTensorParallel& model_tp() const { return tp_; }
  ModelTensorParallel& model_tp() { return tp_; }
  int size() const { return tp_.tp->size(); }
  // MoE layers whose experts' FFN is split over tp (0 without expert tensor parallelism).
  int64_t expert_layers() const { return expert_layers_; }
  // Memory offload: the gradients are chunk views, held while the sums read and write them.
  void set_gradient_hold(SpanHold hold) { hold_ = std::move(hold); }

 private:
  models::CausalLM& model_;
  ModelTensorParallel tp_;
  int64_t expert_layers_ = 0;
  SpanHold hold_;
};

// The norm's view of tensor parallelism: two groups, pieces (disjoint over tp: their squares add)
// and whole parameters (the same on every tp rank: counted at tp rank 0); a replicated piece's
// second copy is left out (its first copy counts). Relabels plan.spans by GradSpan::param.
void describe_tensor_parallel_norm(const ModelTensorParallel& tp, GradNormPlan& plan);

}  // namespace tessel::train
