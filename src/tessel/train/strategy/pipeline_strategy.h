// SPDX-License-Identifier: Apache-2.0
// Pipeline parallelism as a strategy of the step (GPipe, Huang et al. 2019; 1F1B and interleaved
// 1F1B, Narayanan et al. 2021; docs/PARALLEL.md). Every pp rank builds the whole model from the
// same seed, then trains only the parameters of its stages: the optimizer, data parallelism and
// ZeRO see nothing else. A step's micro-batches are the pipeline's, so a pp run consumes exactly
// the batches of one process; the schedule runs their forwards and backwards, in place of the
// trainer's plain micro-batch loop.
//
// A tied embedding (CausalLM::head_tied_parameters, GPT-2's wte): the last stage multiplies with
// its copy but does not train it; after backward it sends its gradient to the first stage, which
// adds it to its own (the sum one process forms) and alone updates it; the updated weight then
// goes back to the last stage. So the copies stay identical and the global norm and ZeRO count it
// once (Megatron-LM's embedding group, as a reduce and a broadcast instead of an all-reduce).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessel/io/token_dataset.h"
#include "tessel/train/layout.h"
#include "tessel/train/pipeline_stage.h"
#include "tessel/train/strategy/axis_strategy.h"
#include "tessel/train/strategy/data_parallel_strategy.h"
#include "tessel/train/strategy/tensor_parallel_strategy.h"

namespace tessel::train {

struct PipelineSetup {
  std::string schedule;                  // parallel.schedule: "gpipe", "1f1b", "interleaved:V"
  std::string split;                     // parallel.pipeline_split ("" : balanced)
  int64_t micro_batches = 1;             // per step (train.grad_accum)
  int64_t micro_batch = 1;               // sequences per micro-batch
  int64_t seq_len = 0;                   // of a training window
  DType dtype = DType::F32;              // of the activations between stages
  TensorParallelStrategy* tp = nullptr;  // tensor parallelism inside the stages
  std::function<void(int64_t)> begin_micro_batch;  // before each stage forward, with its index
  std::function<void(const std::string&)> print;
};

class PipelineStrategy : public AxisStrategy {
 public:
  PipelineStrategy(models::CausalLM& model, const TrainLayout& layout, PipelineSetup setup);
  ~PipelineStrategy() override;

  std::string name() const override;
  void describe_norm(GradNormPlan& plan) const override;
  void after_update() override;  // the tied embedding back to the last stage

  // Memory offload: holds a tensor of this stage that lives in a chunk while the tied embedding's
  // gradient sum, its weight exchange or the model's sync reads or writes it (null for plain
  // memory; grad_norm.h's SpanHold).
  void set_hold(SpanHold hold) { hold_ = std::move(hold); }
  // Memory offload under dp: the first stage's gradient of a tied embedding lives in a bucket
  // laid out in chunks (.grad() stays unbound): the head's gradient is added there
  // (DataParallel::add_to_gradient) instead of into .grad().
  void set_add_gradient(std::function<void(const std::string&, const Tensor&)> add) {
    add_gradient_ = std::move(add);
  }
  // ZeRO-3 shards the stages' parameters (built after this axis, from its parameters): the dense
  // partition first, then under --ep the experts'.
  void set_zero3(std::vector<parallel::Zero3Parameters*> zero3) { zero3_ = std::move(zero3); }
  // The step's micro-batches through the schedule, with `scope` held over all of them and the
  // last stage's loss multiplied by `loss_scale`; returns their loss sum over the whole model
  // (collective over pp).
  double forward_backward(std::vector<io::TokenBatch> batches, double loss_scale,
                          const std::function<std::vector<std::shared_ptr<void>>()>& scope);

  // The parameters of this rank's stages, and the modules they run.
  nn::NamedTensors trainable_parameters() const;
  const std::vector<nn::Module*>& modules() const { return modules_; }
  // Mixture-of-experts models: this rank's stage forwards of the last step (pipeline_stage.h).
  const std::vector<ModelStages::ExpertLoad>& expert_loads() const {
    return stages_->expert_loads();
  }
  // The transformer blocks each pipeline rank's stages hold, by rank.
  const std::vector<int64_t>& blocks_per_rank() const { return blocks_per_rank_; }
  // This rank's blocks (their indices, in forward order: stage by stage).
  const std::vector<int64_t>& rank_blocks() const { return rank_blocks_; }
  // Parameters the last stage multiplies with although the first stage trains them.
  const std::vector<std::string>& tied() const { return tied_; }
  // Every parameter, on every rank, from the rank that trains it (for evaluation and samples).
  void sync_model();
  // The last step's compute time and makespan (ms), for the step's breakdown.
  const std::optional<parallel::pipeline::ExecutionResult>& last() const { return last_; }
  // The measured timeline of the last step beside the simulator's prediction, printed, and
  // written into `run_dir` (Chrome trace, `tessel report`'s timeline). Collective over pp.
  void report(const std::string& run_dir, int64_t step);

 private:
  models::CausalLM& model_;
  TrainLayout layout_;
  PipelineSetup setup_;
  std::unique_ptr<ModelStages> stages_;
  std::unique_ptr<parallel::pipeline::PipelineExecutor> executor_;
  std::unordered_map<std::string, int> owner_;  // parameter name -> pp rank that trains it
  std::vector<std::string> tied_;
  std::vector<int64_t> blocks_per_rank_;
  std::vector<int64_t> rank_blocks_;
  std::vector<nn::Module*> modules_;
  std::optional<parallel::pipeline::ExecutionResult> last_;
  std::vector<parallel::Zero3Parameters*> zero3_;
  SpanHold hold_;
  std::function<void(const std::string&, const Tensor&)> add_gradient_;
};

}  // namespace tessel::train
