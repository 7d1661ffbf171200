// SPDX-License-Identifier: Apache-2.0
// The single-process training loop: micro-batches from the token loader, gradient accumulation,
// global-norm clipping, AdamW with a warmup + decay schedule, skipping of non-finite steps (and an
// abort after too many in a row), periodic evaluation, crash-safe checkpoints, a clean stop on
// SIGTERM/SIGINT, exact resume, and a generated sample at the end.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "tessel/core/process_memory.h"
#include "tessel/core/rng.h"
#include "tessel/dist/communicator.h"
#include "tessel/io/token_dataset.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/causal_lm.h"
#include "tessel/parallel/zero/zero_optimizer.h"
#include "tessel/train/checkpoint/checkpoint_placement.h"
#include "tessel/train/checkpoint/run_directory.h"
#include "tessel/train/config.h"
#include "tessel/train/layout.h"
#include "tessel/train/metrics/metric_sinks.h"
#include "tessel/train/metrics/metrics.h"
#include "tessel/train/model_presets.h"
#include "tessel/train/optim/adamw.h"
#include "tessel/train/optim/lr_schedule.h"
#include "tessel/train/optim/optimizer_group.h"
#include "tessel/train/optim/sharded_adamw.h"
#include "tessel/train/stop_signal.h"
#include "tessel/train/strategy/data_parallel_strategy.h"
#include "tessel/train/strategy/expert_parallel_strategy.h"
#include "tessel/train/strategy/offload_strategy.h"
#include "tessel/train/strategy/pipeline_strategy.h"
#include "tessel/train/strategy/precision_strategy.h"
#include "tessel/train/strategy/tensor_parallel_strategy.h"

namespace tessel::train {

class CheckpointWriter;

struct TrainSummary {
  int64_t first_step = 1;  // the first step this run executed (after a resume: checkpoint + 1)
  int64_t last_step = 0;   // the last step completed
  double last_loss = 0;
  std::optional<double> val_loss;  // of the last evaluation
  int64_t skipped_steps = 0;
  bool interrupted = false;  // stopped by SIGTERM/SIGINT (a checkpoint was written)
  int stop_signal = 0;       // the signal that stopped it, whichever rank received it
  // A write that failed (the JSONL log, the progress output) and stopped the run after a
  // checkpoint; the CLI reports it and exits non-zero. World rank 0 has the whole message.
  std::string error;
  std::string last_checkpoint;
  std::string sample;  // the generated text (or ids when the dataset has no tokenizer)
  double seconds = 0;
};

// Test hooks: called on the training thread.
struct TrainerHooks {
  std::function<void(int64_t step)> after_backward;  // gradients of `step` are complete
  std::function<void(const StepRecord&)> on_step;
  std::function<void(const EvalRecord&)> on_eval;
  std::function<void(const std::string&)> print;  // progress output (default: stdout)
  // Build the model in the layout (each rank allocates and fills its share), write the "build"
  // record, and stop before the optimizer and the data loader exist: run() then does nothing
  // (tessel train --build-only: does the layout's construction fit?).
  bool build_only = false;
};

class Trainer {
 public:
  // `resume` is "" (start fresh; an existing run directory with checkpoints is an Error: use
  // --resume) or a checkpoint directory. `layout`: this rank's mesh (default: one process); each
  // dp rank trains on its own rows of every global batch, and world rank 0 alone prints, logs and
  // writes checkpoints.
  Trainer(const TrainConfig& config, const std::string& resume = "", TrainerHooks hooks = {},
          TrainLayout layout = {});
  ~Trainer();

  TrainSummary run();
  // The planner's prediction for this run's layout, written into every step record from now on.
  void set_prediction(PlanPrediction prediction) { prediction_ = std::move(prediction); }

  const TrainConfig& config() const { return config_; }
  models::CausalLM& model() { return *model_; }
  int64_t optimizer_steps() const { return optimizer_->step_count(); }
  int64_t step() const { return step_; }  // completed optimizer steps (incl. skipped ones)
  // memory.device_budget set: the chunks and their tiers (null otherwise).
  OffloadStrategy* offload() const { return offload_.get(); }

  // Writes a checkpoint of the current state into checkpoint.dir; returns its path.
  std::string save_checkpoint();
  // Mean validation loss over eval.batches micro-batches (always the same windows).
  EvalRecord evaluate();

 private:
  void build(const std::string& resume);
  void load_checkpoint(const std::string& dir);
  void load_legacy_state(const std::string& dir, int64_t optimizer_step);  // older formats
  // Rank 0, into `writer`'s directory (every rank's pieces are there): the index, the HF-layout
  // model, state.json, train.toml; then commits.
  std::string write_checkpoint(CheckpointWriter& writer);
  // `text` as rank 0 has it, on every rank (collective over the world); the world's barrier.
  std::string share_leader_string(const std::string& text) const;
  void barrier_world() const;
  // trainer_checkpoint_pieces.cpp: layout-independent checkpoints (checkpoint_pieces.h). Where a
  // local parameter (or its moment) lies in the global tensor; this rank's pieces of parameters
  // and moments; loading this rank's parts from any layout's pieces; the HF model from them.
  sharding::LocalLayout checkpoint_placement(const std::string& param, const Shape& local) const;
  std::string checkpoint_layout_json() const;
  // The ZeRO optimizers and the buckets they shard: the dense one over dp, then under --ep the
  // experts' over their expert group.
  std::vector<std::pair<parallel::DataParallel*, parallel::ZeroAdamW*>> zero_optimizers() const;
  std::vector<Piece> checkpoint_pieces() const;
  // trainer_device.cpp: a run on a CUDA device (train.device). What such a run refuses, checked
  // before the model is allocated; the model and optimizer state moved there once built (and
  // loaded); a batch's ids moved there; a device scalar read on the host.
  void check_device_run(const models::ModelConfig& model) const;
  void move_to_run_device();
  Tensor on_run_device(const Tensor& t) const;
  static double host_scalar(const Tensor& t);
  void load_checkpoint_pieces(const std::string& dir, int64_t optimizer_step);
  // Fills the parameters this rank holds (its ZeRO-3 blocks, its tensor-parallel pieces, its
  // stages' parameters and the tied ones its head uses) from `source`, touching nothing else; the
  // other stages' parameters stay shape-only (train/materialize.h).
  // zero3_shards false: only the parameters held whole (a dp offloaded run computes its ZeRO-3
  // shards in their chunks instead, fill_zero3_shard).
  void fill_parameters(const RegionSource& source, bool zero3_shards = true);
  // Bucket `bucket` of `dp`: this rank's part of each of its parameters into `shard` (this
  // rank's block of the bucket, or its place in a chunk), from `source`.
  void fill_zero3_shard(const RegionSource& source, const parallel::DataParallel& dp,
                        int64_t bucket, const Tensor& shard);
  // The parameters this rank holds whole (outside ZeRO-3's blocks): its stages' and the tied ones
  // its head uses. The model is built shape-only; these are allocated (not written) once the
  // axes have cut it, the rest never.
  NamedTensors held_whole_parameters() const;
  void materialize_held_parameters() const;
  int64_t held_parameter_bytes() const;  // those and this rank's ZeRO-3 blocks
  // The AdamW moments this rank holds (ZeRO: its blocks), from `source` under their checkpoint
  // keys ("exp_avg.<name>"), whose global shapes `stored_shape` gives; then the step count.
  void fill_moments(const RegionSource& source,
                    const std::function<Shape(const std::string&)>& stored_shape,
                    int64_t optimizer_step);
  void write_checkpoint_model(const std::string& dir) const;
  // trainer_strategies.cpp: ZeRO-3's gathering units (of this rank's stages under pp).
  std::vector<parallel::Zero3Unit> zero3_units();
  void print(const std::string& line) const;
  std::string expert_bytes_line() const;  // this rank's expert parameter bytes (trainer_strategies)
  // One optimizer step (trainer_step.cpp), phase by phase.
  bool train_step(StepRecord& record);
  struct StepMarks {  // what the step's metrics are measured from
    double start_s = 0;
    int64_t base_bytes = 0;  // allocator bytes in use before forward
  };
  StepMarks begin_step();
  // The step's micro-batches (or pipeline schedule); their loss sum. A mixture-of-experts model's
  // auxiliary losses join the loss backward starts from, and their values and the layers' loads
  // go into the record.
  double forward_backward(StepRecord& record);
  // Keys the dropout generator to micro-batch m of the step about to run (before its forward).
  void begin_micro_batch(int64_t m);
  // trainer_expert_load.cpp: one forward's auxiliary loss and the routing of `layers` (some of
  // the model's MoE layers) into the record, each loss weighted 1 / micro_batches.
  void add_expert_load(StepRecord& record, double aux, int64_t micro_batches,
                       const std::vector<models::ExpertLayerStats>& layers) const;
  // Pipeline stages: each of this rank's stage forwards of the step, then every stage's layers
  // and losses on every pp rank (collective over pp).
  void add_stage_expert_loads(StepRecord& record) const;
  // The layers' loads of every dp rank summed (their losses averaged), so a record does not
  // depend on how the batch was split. Collective over dp.
  void reduce_expert_load(StepRecord& record) const;
  void sync_gradients(StepRecord& record);  // every axis, in list order
  double global_norm();              // over every axis: each element of the gradient counted once
  void inject_faults(int64_t step);  // fault.* and the after_backward hook (crash-safety tests)
  void update(StepRecord& record, int64_t step);  // the skip rule, or clip + scale + optimizer
  void end_step(StepRecord& record, int64_t step, const StepMarks& marks);  // counters, metrics
  std::string generate_sample();
  // The layout's axes (train/strategy/): built after the model, in the order of the gradient
  // synchronisation; an absent axis is null and not in strategies_.
  // `init`: the initialisation recipes' source when the model was built without values
  // (train/materialize.h); each rank fills its share from it once the axes have cut the model.
  void build_strategies(const RegionSource& init);
  // memory.device_budget set (one process): the chunks of the model's state (offload_strategy.h),
  // each parameter filled from `init` straight into its chunk (null: a checkpoint load fills them).
  void build_offload(const RegionSource& init);
  // memory.device_budget set with --dp N: each rank's ZeRO shards in chunks (after the optimizer).
  void build_offload_shards(const RegionSource& init);
  void add_expert_offload_shards(OffloadShardSetup& setup, const RegionSource& init);
  bool buckets_fit(size_t chunk_bytes);
  // Mixed precision with the 16-bit copies in chunks: the precision scope takes them as kept.
  void use_offloaded_copies();
  void build_optimizer(const RegionSource& init);
  void check_offload_layout() const;  // the layouts offload composes with
  void zero_plain_gradients();        // offloaded: those of parameters not in chunks
  memory::MemoryConfig offload_memory_config() const;
  // Under tp or pp: memory.nvme_dir/rank<r>, created, so ranks never share a swap or probe file.
  std::string rank_nvme_dir(const std::string& nvme_dir) const;
  // The loss of one micro-batch (the vocab-parallel one under tp).
  Tensor compute_loss(const Tensor& ids, const Tensor& targets);
  // The same for evaluation, one chunk of positions' logits at a time (CausalLM::eval_loss).
  Tensor compute_eval_loss(const Tensor& ids, const Tensor& targets);
  // What the axes hold, for checkpoints, evaluation and the sample (null where absent).
  parallel::DataParallel* ddp() const { return data_ ? &data_->ddp() : nullptr; }
  parallel::Zero3Parameters* zero3() const { return data_ ? data_->zero3() : nullptr; }
  // Every ZeRO-3 parameter partition with the buckets it shards: the dense one over dp, then under
  // --ep the experts' over their expert group (empty below stage 3).
  std::vector<std::pair<parallel::DataParallel*, parallel::Zero3Parameters*>> zero3_parts() const;
  // Collective: every ZeRO-3 partition gathered while the handle lives (null: nothing to do).
  std::shared_ptr<void> gather_all_zero3() const;
  const ModelTensorParallel* tp() const { return tensor_ ? &tensor_->model_tp() : nullptr; }
  NamedTensors trainable_parameters() const;       // the parameters of this rank's stages
  std::vector<nn::Module*> stage_modules() const;  // the modules they run (the model without pp)

  bool leader() const { return layout_.world_rank() == 0; }
  int dp_size() const { return dp_ ? dp_->size() : 1; }
  // The mean of `value` over the dp ranks (value itself without data parallelism).
  double dp_mean(double value) const;
  // trainer_safety.cpp: what is found before the first step, and how a run stops. Rank 0 takes
  // the run directory's lock (and so proves it writable); the next checkpoint must fit in the free
  // space; a resumed run's arguments must agree with its checkpoint.
  void lock_run_directory();
  void check_free_space_for(const models::ModelConfig& mc) const;
  void check_resume_arguments(const std::string& checkpoint, int64_t checkpoint_step,
                              const models::ModelConfig& checkpoint_model) const;
  // Rank 0: the sinks of the run's records (metric_sinks.h): the progress line, the JSONL log
  // (log.jsonl) and TensorBoard (log.tensorboard).
  void setup_sinks(int64_t resume_step);
  // One record to every sink; a failed write is kept in write_failure_ and stops the run at the
  // next step.
  void write_record(const StepRecord& r);
  void write_record(const EvalRecord& e);
  void write_record(const CheckpointRecord& c);
  // trainer_memory.cpp: each rank's figures, in world-rank order, to every rank (k values each).
  std::vector<double> gather_world(const std::vector<double>& mine) const;
  // The resident set and peak of every rank into the step's record.
  void record_memory(StepRecord& r) const;
  // Around a checkpoint save or load: returns freed heap to the system and reads the resident
  // set; then the record of the operation with every rank's figures.
  CheckpointMemory checkpoint_memory_before();
  CheckpointRecord checkpoint_record(const std::string& event, double ms, CheckpointMemory before);
  // The stop every rank agrees on at a step boundary: a signal any rank received, or a failed
  // write on rank 0. Every rank leaves the loop at the same step.
  struct StopRequest {
    int signal = 0;
    bool write_failed = false;
    bool any() const { return signal != 0 || write_failed; }
  };
  StopRequest stop_agreed() const;
  // After a save of `seconds`: warns once when it outlasts the launcher's grace period.
  void check_save_time(double seconds);
  // TrainSummary::error for a run stopped by a failed write, saved in `checkpoint`.
  std::string stopped_by_failure(const std::string& checkpoint) const;
  // This rank's model state against the ZeRO formula for the stage (stage 0: replicated).
  parallel::MemoryReport memory_report() const;
  // The step's breakdown (trainer_breakdown.cpp): compute, exposed communication per axis, the
  // pipeline's bubble; the slowest rank's figures.
  void breakdown_begin();
  void breakdown_after_backward();
  void breakdown(StepRecord& r);
  double blocking_ms(const dist::CommPtr& axis) const;

  // World rank 0: the run directory's lock. Declared first so that it is released last, after
  // every file of the run is closed.
  std::unique_ptr<RunLock> lock_;
  TrainConfig config_;
  TrainerHooks hooks_;
  TrainLayout layout_;
  dist::CommPtr dp_;  // layout_.dp
  std::string run_dir_;
  Generator
      rng_;  // model initialisation, then dropout (drawn positionally: keyed by step, micro-batch)
  std::shared_ptr<models::CausalLM> model_;
  // The axes (an absent one is null), and the list the step's hooks run over.
  std::unique_ptr<PrecisionStrategy> precision_;
  std::unique_ptr<PipelineStrategy> pipeline_;
  std::unique_ptr<TensorParallelStrategy> tensor_;
  std::unique_ptr<DataParallelStrategy> data_;
  std::unique_ptr<ExpertParallelStrategy> expert_;
  std::unique_ptr<OffloadStrategy> offload_;
  std::vector<AxisStrategy*> strategies_;
  std::unique_ptr<Optimizer> optimizer_;  // AdamW, or ZeRO's AdamW over dp shards
  AdamW* adamw_ = nullptr;                // optimizer_ without ZeRO (its moments, for checkpoints)
  Device device_ = Device::cpu();         // train.device: where the model and its step live
  parallel::ZeroAdamW* zero_ = nullptr;   // optimizer_'s shards under parallel.zero_stage 1-3
  ShardedAdamW* sharded_ = nullptr;       // the optimizer that owns zero_
  parallel::ZeroAdamW* expert_zero_ = nullptr;  // --ep with ZeRO 1-3: the experts' shards
  ShardedAdamW* expert_sharded_ = nullptr;      // the optimizer that owns expert_zero_
  OffloadAdamW* offload_adamw_ = nullptr;       // optimizer_ under memory offload
  LrSchedule schedule_;
  std::shared_ptr<const io::TokenDataset> train_data_, val_data_;
  std::unique_ptr<io::TokenLoader> loader_;
  std::optional<io::Tokenizer> tokenizer_;
  std::string tokenizer_dir_;
  int64_t eot_id_ = -1;
  double flops_per_token_ = 0;
  double recompute_flops_per_token_ = 0;  // the forward work recomputation repeats (for HFU)
  int64_t run_peak_bytes_ = 0;
  std::optional<CheckpointRecord> loaded_;  // the resume's record, written once sinks exist
  // The model's construction (event "build"): time and resident set around building the model and
  // cutting it into this layout, written once sinks exist.
  std::optional<CheckpointRecord> built_;
  std::unique_ptr<ResidentPeakSampler> peak_sampler_;  // during a checkpoint save or load
  int64_t step_ = 0, tokens_ = 0, skipped_ = 0, bad_in_a_row_ = 0;
  std::optional<double> last_val_loss_;
  MetricSinks sinks_;                  // rank 0 only
  mutable std::string write_failure_;  // rank 0: the first failed write of a record or line
  bool warned_save_time_ = false;
  // This step's timing marks (trainer_breakdown.cpp): its start, each axis's blocking time.
  double mark_start_ms_ = 0, mark_tp_ms_ = 0, mark_dp_ms_ = 0;
  double fb_ms_ = 0, tp_fb_ms_ = 0;  // forward + backward: wall, tp's part
  bool local_nonfinite_ = false;     // this rank's gradients held inf/NaN (the last norm)
  std::optional<PlanPrediction> prediction_;
};

}  // namespace tessel::train
