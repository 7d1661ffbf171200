// SPDX-License-Identifier: Apache-2.0
// Data parallelism as a strategy of the step: gradients averaged over the dp ranks in buckets,
// overlapped with the last micro-batch's backward (Li et al., "PyTorch Distributed", VLDB 2020),
// and ZeRO over the same axis (Rajbhandari et al. 2020): from stage 2 each rank keeps only its
// shard of the averaged gradients, at stage 3 also only its shard of the parameters, gathered unit
// by unit around their forward and backward (ZeRO's optimizer is the trainer's Optimizer,
// train/optim/sharded_adamw.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/parallel/data/data_parallel.h"
#include "tessel/parallel/zero/zero3.h"
#include "tessel/train/strategy/axis_strategy.h"

namespace tessel::train {

struct DataParallelSetup {
  parallel::DataParallelOptions options;  // buckets, overlap (the reduction follows the stage)
  int zero_stage = 0;
  std::vector<parallel::Zero3Unit> units;  // stage 3: the gathering units
  // The averages wait until every backward has run, for sums over other axes that must come
  // first (tensor parallelism's, when ZeRO-2/3 keep only shards of the averages).
  bool after_other_sums = false;
  // Every rank initialised from the same seed: rank 0's values are broadcast first, which makes
  // their equality a fact, not a hope.
  bool broadcast = false;
  // False: the parameters hold no values yet; ZeRO-3's shards are filled by the caller
  // (parallel::Zero3Options::copy_values).
  bool copy_values = true;
  // False: ZeRO-3's shards are shape-only, laid out (and filled) by memory offload
  // (parallel::Zero3Options::allocate_shards).
  bool allocate_shards = true;
};

class DataParallelStrategy : public AxisStrategy {
 public:
  // `params`: the parameters this rank trains (its pipeline stages' share).
  DataParallelStrategy(const nn::NamedTensors& params, dist::CommPtr dp, DataParallelSetup setup);
  ~DataParallelStrategy() override;

  std::string name() const override;
  void begin_step() override;
  void before_backward(bool last) override;
  void after_backward() override;
  void sync_gradients(StepRecord& record) override;
  void describe_norm(GradNormPlan& plan) const override;
  void record(StepRecord& record) override;

  parallel::DataParallel& ddp() const { return *ddp_; }
  parallel::Zero3Parameters* zero3() const { return zero3_.get(); }  // null below stage 3
  int zero_stage() const { return stage_; }
  int size() const { return ddp_->comm().size(); }

 private:
  dist::CommPtr comm_;
  std::unique_ptr<parallel::DataParallel> ddp_;
  std::unique_ptr<parallel::Zero3Parameters> zero3_;
  int stage_ = 0;
  bool after_other_sums_ = false;
  uint64_t issued_before_ = 0;  // the rank's collectives issued before this step
};

// ZeRO-3 (null: nothing happens): every unit gathered and kept while the returned handle lives;
// or one unit, by name (a unit this rank does not have: nothing). Collective over dp.
std::shared_ptr<void> zero3_gather_all(parallel::Zero3Parameters* zero3);
std::shared_ptr<void> zero3_gather_unit(parallel::Zero3Parameters* zero3, const std::string& unit);

}  // namespace tessel::train
