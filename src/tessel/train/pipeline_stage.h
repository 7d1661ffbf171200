// SPDX-License-Identifier: Apache-2.0
// A causal LM cut into pipeline stages for the trainer: the layer list the partition works on
// ("embedding", "block.0", ..., "head", as models::CausalLM layers them), the stage runner that
// computes one stage's share of the forward for one micro-batch (the embedding with the first
// stage, the head and the loss with the last). The trainer's pipeline axis that runs them is
// strategy/pipeline_strategy.h.
//
// A mixture-of-experts block's auxiliary loss is added to the backward of the stage where it
// arises (as one process adds every block's to the loss): the stage's output passes through an
// identity whose backward also starts the auxiliary losses' backward, with the gradient (the loss
// scale) the last stage's loss gets, so no stage needs another stage's losses.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/io/token_dataset.h"
#include "tessel/models/causal_lm.h"
#include "tessel/parallel/pipeline/executor.h"
#include "tessel/parallel/pipeline/partition.h"

namespace tessel::train {

// One entry per pipeline layer of `model`, costed by the weights its forward multiplies with (a
// proxy for its FLOPs; CausalLM::layer_costs).
std::vector<parallel::pipeline::LayerCost> pipeline_layer_costs(const models::CausalLM& model);

// The stages' partition of the pipeline layers `costs` lists (pipeline_layer_costs): the blocks
// per stage that `split` gives (parallel.pipeline_split, "3,4,4,2": the embedding joins the first
// stage and the final norm and head the last, which may therefore hold no block — "0,6,6,0" puts
// them on stages of their own; one count per stage, which for an interleaved schedule is every
// virtual stage in order) or, when `split` is empty, the balance of the costs over `stages`. An
// Error naming the split when it does not have `stages` counts, leaves a middle stage without a
// block, or does not sum to the model's blocks.
parallel::pipeline::StagePartition pipeline_partition(
    const std::vector<parallel::pipeline::LayerCost>& costs, int64_t stages,
    const std::string& split);
// The split that gives `partition` back ("3,4,4,2"; every contiguous partition has one).
std::string pipeline_split_of(const parallel::pipeline::StagePartition& partition);
// The layers of each stage (pipeline layers [begin, end) of a model of `blocks` blocks) as the
// trainer reports its cut: "embedding..block.2 | block.3..head".
std::string pipeline_stages_line(const std::vector<std::pair<int64_t, int64_t>>& stage_layers,
                                 int64_t blocks);

// The module that holds parameter `name` ("h.0.attn.c_attn.weight" -> h.0.attn.c_attn) directly.
nn::Module* owner_module(nn::Module& root, const std::string& name);

// "gpipe", "1f1b" or "interleaved:V" (V >= 2 virtual stages per rank; "interleaved" is V = 2).
parallel::pipeline::Schedule schedule_from_spec(const std::string& spec, int ranks,
                                                int microbatches);

class ModelStages : public parallel::pipeline::StageRunner {
 public:
  // `partition` over pipeline_layer_costs(model)'s layers, one entry per pipeline stage.
  ModelStages(models::CausalLM& model, parallel::pipeline::StagePartition partition);

  // The stage whose layers hold parameter `name` (a tied embedding: the first stage, which owns
  // it).
  int stage_of_parameter(const std::string& name) const;
  // The micro-batches of the step about to run: micro-batch i is batches[i].
  void set_batches(std::vector<io::TokenBatch> batches) {
    batches_ = std::move(batches);
    expert_loads_.clear();
  }
  // The last stage's loss from its logits [B, T, V'] and targets [B, T] (default: the
  // cross-entropy over the whole vocabulary; tensor parallelism passes the vocab-parallel one).
  using LossFn = std::function<Tensor(const Tensor& logits, const Tensor& targets)>;
  void set_loss(LossFn loss) { loss_ = std::move(loss); }
  // fp16 loss scaling: the last stage returns loss * scale (backward starts from it).
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  // Called with the micro-batch before each stage forward (the trainer keys dropout by it).
  void set_before_forward(std::function<void(int microbatch)> f) { before_forward_ = std::move(f); }
  Tensor forward(int stage, int microbatch, const Tensor& input) override;

  // Mixture-of-experts models: each stage forward of the step that ran MoE layers, in the order
  // they ran: the sum of its blocks' auxiliary losses and their routing. Cleared by set_batches.
  struct ExpertLoad {
    double aux = 0;
    std::vector<models::ExpertLayerStats> layers;
  };
  const std::vector<ExpertLoad>& expert_loads() const { return expert_loads_; }

  const parallel::pipeline::StagePartition& partition() const { return partition_; }

 private:
  models::CausalLM& model_;
  parallel::pipeline::StagePartition partition_;
  std::vector<io::TokenBatch> batches_;
  LossFn loss_;
  double loss_scale_ = 1.0;
  std::function<void(int)> before_forward_;
  std::vector<ExpertLoad> expert_loads_;
};

}  // namespace tessel::train
