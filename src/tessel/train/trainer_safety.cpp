// SPDX-License-Identifier: Apache-2.0
// Nothing lost: what the trainer checks before its first step (the run directory is this run's
// alone, writable, with room for the next checkpoint; a resumed run's arguments agree with the
// checkpoint), and how a run stops (a signal any rank received or a failed write on rank 0, agreed
// by every rank at a step boundary, then one checkpoint). Everything here fails at start or stops
// between steps, never in the middle of a collective.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "tessel/core/log.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

namespace fs = std::filesystem;

namespace {

// Bytes per parameter of a checkpoint: f32 parameters in model.safetensors (the HF export) and
// again in the pieces, with the two f32 AdamW moments (checkpoint_pieces.h).
constexpr uint64_t kCheckpointBytesPerParameter = 4 + 4 + 8;

std::string shape_of(const models::ModelConfig& c) {
  return c.summary() + ", max_positions " + std::to_string(c.max_positions()) + ", vocab_size " +
         std::to_string(c.vocabulary_size());
}

}  // namespace

void Trainer::lock_run_directory() {
  if (!leader()) return;
  lock_ = std::make_unique<RunLock>(run_dir_);
  if (!lock_->reclaimed_from().empty()) {
    print("note: " + lock_->path() + " was left by " + lock_->reclaimed_from() +
          ", which ended without releasing it (a crash or kill -9); this run takes it over");
  }
}

void Trainer::check_free_space_for(const models::ModelConfig& mc) const {
  if (!leader()) return;
  uint64_t tokenizer_bytes = 0;
  std::error_code ec;
  if (!tokenizer_dir_.empty()) {
    for (const std::string& name : mc.family().tokenizer_files()) {
      const uint64_t n = fs::file_size(fs::path(tokenizer_dir_) / name, ec);
      if (!ec) tokenizer_bytes += n;
    }
  }
  const uint64_t params = uint64_t(mc.parameter_count());
  check_free_space(run_dir_, kCheckpointBytesPerParameter * params + tokenizer_bytes,
                   "the next checkpoint (" + std::to_string(kCheckpointBytesPerParameter) +
                       " bytes per parameter x " + std::to_string(params) +
                       " parameters, plus the tokenizer files)");
}

void Trainer::check_resume_arguments(const std::string& checkpoint, int64_t checkpoint_step,
                                     const models::ModelConfig& checkpoint_model) const {
  const int64_t steps = config_.train.steps;
  TESSEL_CHECK(steps > checkpoint_step, "train: the checkpoint ", checkpoint, " is at step ",
               checkpoint_step, " and train.steps = ", steps,
               steps == checkpoint_step ? " leaves nothing to train" : " is below it",
               ": to continue, set train.steps above ", checkpoint_step,
               " (e.g. --set train.steps=", checkpoint_step + std::max<int64_t>(checkpoint_step, 1),
               ")");
  // A resumed run trains the checkpoint's model; a model.config that names another one would be
  // silently ignored. Only what still resolves is compared: the files a run started from may be
  // gone, and the checkpoint's own config.json is what counts.
  const bool from_init = !config_.model.init_from.empty();
  const std::string key = from_init ? "model.init_from" : "model.config";
  const std::string spec = from_init ? config_.model.init_from : config_.model.config;
  models::ConfigPtr named;
  try {
    named = resolve_model_config(spec, key);
  } catch (const Error&) {
  }
  TESSEL_CHECK(!named || named->same_shapes(checkpoint_model), "train: ", key, " = '", spec,
               "' describes a model of ", shape_of(*named), ", but the checkpoint ", checkpoint,
               " holds one of ", shape_of(checkpoint_model),
               "; a resumed run trains its checkpoint's model: drop the override, or start a new "
               "run in another checkpoint.dir");
}

// The sinks keep their first failed write and send no more records to files after it (a later
// record would leave a gap before it); the failure stops the run like a signal.
void Trainer::write_record(const StepRecord& r) {
  sinks_.on_step(r);
  if (write_failure_.empty()) write_failure_ = sinks_.failure();
}

void Trainer::write_record(const EvalRecord& e) {
  sinks_.on_eval(e);
  if (write_failure_.empty()) write_failure_ = sinks_.failure();
}

Trainer::StopRequest Trainer::stop_agreed() const {
  StopRequest local;
  local.signal = stop_signal();
  local.write_failed = !write_failure_.empty();
  if (!dp_ && !layout_.pp && !layout_.tp) return local;
  // Max over the whole grid: a signal delivered to one rank only (a one-rank SIGTERM, or a
  // launcher that signals ranks one by one) stops every rank, and every rank names it.
  Tensor flag = zeros({2}, DType::I32);
  flag.data<int32_t>()[0] = local.signal;
  flag.data<int32_t>()[1] = local.write_failed ? 1 : 0;
  if (dp_) dp_->all_reduce(flag, dist::ReduceOp::Max);
  if (layout_.pp) layout_.pp->all_reduce(flag, dist::ReduceOp::Max);  // dp x pp: the whole grid
  if (layout_.tp) layout_.tp->all_reduce(flag, dist::ReduceOp::Max);
  return {flag.data<int32_t>()[0], flag.data<int32_t>()[1] != 0};
}

std::string Trainer::stopped_by_failure(const std::string& checkpoint) const {
  // Other ranks only know that rank 0 failed; rank 0 reports it.
  const std::string what = leader() ? write_failure_ : "train: a write on rank 0 failed";
  return what + "; the run stopped after step " + std::to_string(step_) +
         (checkpoint.empty() ? std::string(" (no checkpoint could be written)")
                             : " with the checkpoint " + checkpoint) +
         "; make room and continue with: tessel train --resume " + run_dir_;
}

void Trainer::check_save_time(double seconds) {
  if (!leader() || warned_save_time_) return;
  const GracePeriod grace = launcher_grace_period();
  if (grace.launcher.empty() || seconds <= grace.seconds) return;
  warned_save_time_ = true;
  char took[32];
  std::snprintf(took, sizeof took, "%.1f s", seconds);
  char waits[32];
  std::snprintf(waits, sizeof waits, "%g s", grace.seconds);
  print(std::string("warning: this checkpoint took ") + took + " to save, but " + grace.launcher +
        " kills the ranks " + waits +
        " after it passes on a SIGTERM: a stop would lose the checkpoint of the step it stops at "
        "(the previous one stays); " +
        grace.how_to_raise + " (README.md, Parallel training)");
}

}  // namespace tessel::train
