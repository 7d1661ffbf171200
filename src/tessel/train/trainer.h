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

#include "tessel/core/rng.h"
#include "tessel/dist/communicator.h"
#include "tessel/io/token_dataset.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/gpt2.h"
#include "tessel/parallel/data_parallel.h"
#include "tessel/parallel/zero_optimizer.h"
#include "tessel/train/adamw.h"
#include "tessel/train/config.h"
#include "tessel/train/layout.h"
#include "tessel/train/lr_schedule.h"
#include "tessel/train/metrics.h"

namespace tessel::train {

struct TrainSummary {
  int64_t first_step = 1;  // the first step this run executed (after a resume: checkpoint + 1)
  int64_t last_step = 0;   // the last step completed
  double last_loss = 0;
  std::optional<double> val_loss;  // of the last evaluation
  int64_t skipped_steps = 0;
  bool interrupted = false;  // stopped by SIGTERM/SIGINT (a checkpoint was written)
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

  const TrainConfig& config() const { return config_; }
  models::GPT2& model() { return *model_; }
  int64_t optimizer_steps() const { return zero_ ? zero_->step_count() : optimizer_->step_count(); }
  int64_t step() const { return step_; }  // completed optimizer steps (incl. skipped ones)

  // Writes a checkpoint of the current state into checkpoint.dir; returns its path.
  std::string save_checkpoint();
  // Mean validation loss over eval.batches micro-batches (always the same windows).
  EvalRecord evaluate();

 private:
  void build(const std::string& resume);
  void load_checkpoint(const std::string& dir);
  std::string write_checkpoint(const NamedTensors& moments);
  void print(const std::string& line) const;
  bool train_step(StepRecord& record);
  std::string generate_sample();

  bool leader() const { return layout_.world_rank() == 0; }
  int dp_size() const { return dp_ ? dp_->size() : 1; }
  // The mean of `value` over the dp ranks (value itself without data parallelism).
  double dp_mean(double value) const;
  bool stop_agreed() const;
  // This rank's model state against the ZeRO formula for the stage (stage 0: replicated).
  parallel::MemoryReport memory_report() const;

  TrainConfig config_;
  TrainerHooks hooks_;
  TrainLayout layout_;
  dist::CommPtr dp_;  // layout_.dp
  std::string run_dir_;
  Generator rng_;  // model initialisation, then dropout
  std::shared_ptr<models::GPT2> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<parallel::DataParallel> ddp_;  // averages gradients over dp_, overlapped
  std::unique_ptr<parallel::ZeroAdamW> zero_;    // parallel.zero_stage 1-2 (optimizer_ is null)
  LrSchedule schedule_;
  std::shared_ptr<const io::TokenDataset> train_data_, val_data_;
  std::unique_ptr<io::TokenLoader> loader_;
  std::optional<io::Tokenizer> tokenizer_;
  std::string tokenizer_dir_;
  int64_t eot_id_ = -1;
  double flops_per_token_ = 0;
  double recompute_flops_per_token_ = 0;  // the forward work recomputation repeats (for HFU)
  int64_t run_peak_bytes_ = 0;
  int64_t step_ = 0, tokens_ = 0, skipped_ = 0, bad_in_a_row_ = 0;
  std::optional<double> last_val_loss_;
  JsonlLog log_;
};

// The model configuration `model.config` names: a preset ("tiny", "124M", ...), a config.json
// path, or a model directory.
models::GPT2Config resolve_model_config(const std::string& spec);

}  // namespace tessel::train
