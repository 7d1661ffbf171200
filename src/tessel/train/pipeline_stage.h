// SPDX-License-Identifier: Apache-2.0
// GPT-2 cut into pipeline stages for the trainer: the layer list the partition works on
// ("embedding", "h.0", ..., "head"), the stage runner that computes one stage's share of GPT2's
// forward for one micro-batch (the embedding with the first stage, ln_f and the loss with the
// last), and the per-run pipeline state the Trainer keeps (trainer_pipeline.cpp).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessel/io/token_dataset.h"
#include "tessel/models/gpt2.h"
#include "tessel/parallel/pipeline/executor.h"
#include "tessel/parallel/pipeline/partition.h"

namespace tessel::train {

// One entry per pipeline layer of `model`, costed by the weights its forward multiplies with (a
// proxy for its FLOPs): 0 for the embedding (lookups), a block's parameter count, and for the head
// the LM head matrix (the tied wte when tied) plus ln_f.
std::vector<parallel::pipeline::LayerCost> gpt2_layer_costs(const models::GPT2& model);

// "gpipe", "1f1b" or "interleaved:V" (V >= 2 virtual stages per rank; "interleaved" is V = 2).
parallel::pipeline::Schedule schedule_from_spec(const std::string& spec, int ranks,
                                                int microbatches);

class Gpt2Stages : public parallel::pipeline::StageRunner {
 public:
  // `partition` over gpt2_layer_costs(model)'s layers, one entry per pipeline stage.
  Gpt2Stages(models::GPT2& model, parallel::pipeline::StagePartition partition);

  // The stage whose layers hold parameter `name` (wte: the first stage, which owns the tied
  // embedding).
  int stage_of_parameter(const std::string& name) const;
  // The micro-batches of the step about to run: micro-batch i is batches[i].
  void set_batches(std::vector<io::TokenBatch> batches) { batches_ = std::move(batches); }
  // The last stage's loss from its logits [B, T, V'] and targets [B, T] (default: the
  // cross-entropy over the whole vocabulary; tensor parallelism passes the vocab-parallel one).
  using LossFn = std::function<Tensor(const Tensor& logits, const Tensor& targets)>;
  void set_loss(LossFn loss) { loss_ = std::move(loss); }
  // fp16 loss scaling: the last stage returns loss * scale (backward starts from it).
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  Tensor forward(int stage, int microbatch, const Tensor& input) override;

  const parallel::pipeline::StagePartition& partition() const { return partition_; }

 private:
  models::GPT2& model_;
  parallel::pipeline::StagePartition partition_;
  std::vector<io::TokenBatch> batches_;
  LossFn loss_;
  double loss_scale_ = 1.0;
};

// What a pipeline-parallel Trainer holds besides the model.
struct PipelineTraining {
  std::unique_ptr<Gpt2Stages> stages;
  std::unique_ptr<parallel::pipeline::PipelineExecutor> executor;
  std::unordered_map<std::string, int> owner;  // parameter name -> pp rank that trains it
  bool tied = false;  // the last stage multiplies with wte, which the first stage trains
  std::optional<parallel::pipeline::ExecutionResult> last;  // of the last step
};

}  // namespace tessel::train
