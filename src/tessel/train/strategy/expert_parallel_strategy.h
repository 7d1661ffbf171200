// SPDX-License-Identifier: Apache-2.0
// Expert parallelism as a strategy of the step (DeepSpeed-MoE's layout, Rajbhandari et al. 2022):
// the experts of every MoE layer split over the ep ranks (parallel/expert), the ep group being
// consecutive ranks of the dp group, so every rank still trains on its own rows of the batch.
// Non-expert parameters stay replicated and the dp axis averages them as for a dense model; an
// expert's gradient already holds the contributions of every ep rank's tokens (the combine's
// backward brought them), so it is summed over the expert's own data-parallel group (the ranks
// holding the same experts, dp / ep of them) and divided by dp: the dp average of the full
// model's gradient. In the global norm the experts' squares add over ep.
//
// With ZeRO stage 1 or 2 (as DeepSpeed-MoE partitions them) the experts get their own flat
// buckets over their own data-parallel group: a parallel::DataParallel over the expert parameters
// on ep_dp, whose AdamW moments (stage 1) and averaged gradients (stage 2) each ep_dp rank keeps
// only a block of; the dense parameters are partitioned over dp by the dp axis as for a dense
// model.
//
// The experts' reductions (ZeRO 0-2: all-reduce or reduce-scatter of their buckets on ep_dp) are
// overlapped with the last micro-batch's backward as the dense buckets are (PyTorch DDP's
// bucketing): a bucket is launched once every gradient in it is ready, in bucket order, on the
// ep_dp group's own progress lane, so the dense and expert reductions need no common order. A
// rank whose experts received no row fires no gradient hook for them and launches those buckets
// only after its backward, so no expert reduction is waited for during backward (a peer still in
// its backward, in the ep all-to-alls, would never get there). The reductions wait for the end of
// backward where something must come first or shares their lane: a tp sum of the experts'
// gradients (sequence parallelism), ZeRO-3 (the expert units' gathers run on the same ep_dp lane,
// and a rank without rows would issue its reductions after gathers its peers issued after them),
// memory offload (each in-flight reduction holds its shard's chunk, in the host tier), the pipeline
// schedule (as for the dense buckets) and `parallel.overlap=false`.
//
// With pipeline parallelism each stage's MoE layers use the ep and expert-dp groups of that stage
// (the groups lie inside the stage's dp group), and a rank reduces and updates only the experts of
// its own stages.
//
// With ZeRO stage 3 the experts' parameters are partitioned over the same group: each MoE layer's
// local experts are one parallel::Zero3Parameters unit with a bucket of its own, gathered on ep_dp
// when the layer's forward starts (the hooks sit on the MoE module, which every rank runs, so the
// gathers come in one order on every rank even where no row reached a rank's experts), released
// after it, gathered again when backward reaches the layer's output and released once its
// gradients are in the bucket; the dense units over dp are ZeRO-3's as for a dense model.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/models/causal_lm.h"
#include "tessel/parallel/data/data_parallel.h"
#include "tessel/parallel/expert/expert_parallel.h"
#include "tessel/parallel/zero/zero3.h"
#include "tessel/sharding/shard_layout.h"
#include "tessel/train/model_tensor_parallel.h"
#include "tessel/train/optim/grad_norm.h"
#include "tessel/train/strategy/axis_strategy.h"

namespace tessel::train {

// ZeRO-3's units of `model`'s experts: one per MoE layer with its experts among `trained`, named
// "<layer>.experts" and hooked on the MoE module itself (not the experts' module, whose forward a
// rank skips when no row reached its experts).
std::vector<parallel::Zero3Unit> expert_zero3_units(nn::Module& model,
                                                    const std::set<std::string>& trained);

class ExpertParallelStrategy : public AxisStrategy {
 public:
  // Splits `model`'s experts over `ep` (the full experts on every rank before). `ep_dp`: the ranks
  // holding the same experts (null when dp == ep); `dp_size`: the whole data-parallel degree;
  // `zero_stage` 1 or 2: the experts' buckets (`buckets`: their byte budget) partitioned over
  // ep_dp (0: the experts' gradients summed whole); 3: the experts' parameters too, one unit per
  // MoE layer (the parameters hold no values yet: the caller fills the shards).
  // `trained`: the parameters this rank trains (its pipeline stages'; empty: all of them).
  // `overlap`: the experts' reductions may run during the last micro-batch's backward (the
  // caller says whether anything else sums their gradients first; the class comment).
  // `offloaded` (memory offload, ZeRO 1-3): the shards ZeRO keeps of the experts -- their
  // gradient shards (stages 2 and 3) and parameter shards (stage 3) -- stay shape-only, for the
  // offload axis to lay out in its chunks (Trainer::build_offload_shards), as the dense ones.
  ExpertParallelStrategy(models::CausalLM& model, dist::CommPtr ep, dist::CommPtr ep_dp,
                         int dp_size, int zero_stage = 0, int64_t bucket_bytes = 25 << 20,
                         const std::set<std::string>& trained = {}, bool offloaded = false,
                         bool overlap = false);
  ~ExpertParallelStrategy() override;

  std::string name() const override;
  void begin_step() override;
  void before_backward(bool last) override;
  void after_backward() override;
  void sync_gradients(StepRecord& record) override;
  void describe_norm(GradNormPlan& plan) const override;
  void record(StepRecord& record) override;

  // Pipeline stages: the step's all-to-all bytes are summed over pp too (each stage exchanges
  // for its own MoE layers).
  void set_pipeline(dist::CommPtr pp) { pp_ = std::move(pp); }
  // Tensor parallelism: every tp rank holds the same experts (whole, or --etp's columns) and gets
  // the same rows, each sending its piece of them (the bytes add over tp), so the experts'
  // gradients are complete on each (no sum over tp). Whole experts are counted in the norm at tp
  // rank 0; under expert tensor parallelism the pieces `tp` split (model_tp_share: Piece) add.
  void set_tensor_parallel(dist::CommPtr tp, const ModelTensorParallel& split);
  // Memory offload: the experts' gradient shards are in chunks, so their scaling after the
  // reduction holds each while it writes it.
  void set_gradient_hold(SpanHold hold) { hold_ = std::move(hold); }

  int size() const { return ep_->size(); }
  int rank() const { return ep_->rank(); }
  int64_t layers() const { return split_.layers; }
  // Whether `param` holds this rank's experts only; where its rows lie in the global tensor.
  bool holds(const std::string& param) const { return experts_.count(param) > 0; }
  sharding::LocalLayout placement(const std::string& param, const Shape& local) const;
  // The ranks that hold the same experts (null: this rank alone), for checkpoint ownership.
  const dist::CommPtr& expert_dp() const { return ep_dp_; }
  // ZeRO 1-3: the experts' buckets over their group (null without ZeRO), for the optimizer and
  // checkpoints; ZeRO-3: their parameter shards (null below stage 3).
  parallel::DataParallel* zero_buckets() const { return ddp_.get(); }
  parallel::Zero3Parameters* zero3() const { return zero3_.get(); }
  int zero_stage() const { return zero_stage_; }

 private:
  models::CausalLM& model_;
  dist::CommPtr ep_, ep_dp_, pp_, tp_;
  int dp_size_;
  parallel::ExpertParallelResult split_;
  std::set<std::string> experts_;   // every split parameter (every stage's)
  std::set<std::string> trained_;   // those this rank trains
  std::set<std::string> tp_split_;  // experts' FFN pieces over tp (expert tensor parallelism)
  int zero_stage_ = 0;
  dist::CommPtr zero_group_;  // ep_dp, or this rank alone when dp == ep
  std::unique_ptr<parallel::DataParallel> ddp_;
  std::unique_ptr<parallel::DataParallel> sum_;  // ZeRO 0: the experts' sums over ep_dp
  std::unique_ptr<parallel::Zero3Parameters> zero3_;
  bool overlap_ = false;
  int64_t launched_in_backward_ = 0;
  uint64_t issued_before_ = 0;
  SpanHold hold_;
};

}  // namespace tessel::train
