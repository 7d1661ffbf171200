// SPDX-License-Identifier: Apache-2.0
// Where a training run's records go: every step's StepRecord and every evaluation's EvalRecord
// leave the trainer through MetricSinks, a list of sinks called in order on the leader rank:
//   - ProgressSink: the progress line every log.interval steps (and at the first and last), with
//     tokens/s, MFU and HFU averaged over the interval, and each evaluation's line;
//   - JsonlSink: every record as one JSON line (log.jsonl, metrics.h's JsonlLog);
//   - TensorBoardSink: scalars in a TensorBoard event file under RUN_DIR/tensorboard
//     (log.tensorboard; io/tensorboard_events.h).
// A sink that writes a file reports a failed write by throwing an Error; MetricSinks keeps the
// first message and sends file sinks nothing more (a later record would leave a gap before it),
// and the trainer turns it into a stop with a checkpoint (Trainer::write_record).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessel/io/tensorboard_events.h"
#include "tessel/train/metrics/metrics.h"

namespace tessel::train {

inline constexpr const char* kTensorBoardDir = "tensorboard";  // in the run directory

class MetricSink {
 public:
  virtual ~MetricSink() = default;
  virtual void on_step(const StepRecord& r) = 0;
  virtual void on_eval(const EvalRecord& e) = 0;
  virtual void on_checkpoint(const CheckpointRecord&) {}
  virtual void flush() {}
  // Whether the sink writes a file whose records must stay contiguous (see MetricSinks).
  virtual bool writes_file() const { return true; }
};

// Prints through `print` (the trainer's: stdout or a test hook, which reports its own failures).
class ProgressSink final : public MetricSink {
 public:
  using Print = std::function<void(const std::string&)>;
  // `tokens_per_step`: the tokens one optimizer step trains over all ranks.
  ProgressSink(int64_t interval, int64_t tokens_per_step, Print print);
  void on_step(const StepRecord& r) override;
  void on_eval(const EvalRecord& e) override;
  void on_checkpoint(const CheckpointRecord& c) override { print_(checkpoint_line(c)); }
  bool writes_file() const override { return false; }

 private:
  int64_t interval_, tokens_per_step_;
  Print print_;
  double interval_ms_ = 0, interval_tokens_ = 0;  // since the last line
};

class JsonlSink final : public MetricSink {
 public:
  explicit JsonlSink(JsonlLog log) : log_(std::move(log)) {}
  void on_step(const StepRecord& r) override { log_.write(step_json(r)); }
  void on_eval(const EvalRecord& e) override { log_.write(eval_json(e)); }
  void on_checkpoint(const CheckpointRecord& c) override { log_.write(checkpoint_json(c)); }
  const std::string& path() const { return log_.path(); }

 private:
  JsonlLog log_;
};

// The scalars of a step: train/loss, train/lr, train/grad_norm, train/tokens_per_s, train/mfu
// (train/hfu when recomputation makes it differ), train/mem_bytes, train/mem_peak_bytes, and
// train/loss_scale under fp16; of an evaluation: val/loss. A value that is not finite (a skipped
// step's loss) is left out, as the JSONL writes it null.
std::vector<io::ScalarValue> step_scalars(const StepRecord& r);
std::vector<io::ScalarValue> eval_scalars(const EvalRecord& e);

class TensorBoardSink final : public MetricSink {
 public:
  // A new event file in `dir`. A resumed run (resume_step >= 0) first cuts the folder's older
  // event files back to `resume_step`, the steps it is about to repeat, so TensorBoard shows one
  // run; a fresh run (resume_step < 0) removes them, as it starts its JSONL afresh.
  TensorBoardSink(const std::string& dir, int64_t resume_step);
  void on_step(const StepRecord& r) override { writer_.write_scalars(r.step, step_scalars(r)); }
  void on_eval(const EvalRecord& e) override { writer_.write_scalars(e.step, eval_scalars(e)); }
  const std::string& path() const { return writer_.path(); }

 private:
  io::EventFileWriter writer_;
};

class MetricSinks {
 public:
  void add(std::unique_ptr<MetricSink> sink) { sinks_.push_back(std::move(sink)); }
  bool empty() const { return sinks_.empty(); }
  // The record to every sink in order. An Error from a sink is caught: the first is kept in
  // failure(), and from then on sinks that write files are skipped; the progress line goes on.
  void on_step(const StepRecord& r);
  void on_eval(const EvalRecord& e);
  void on_checkpoint(const CheckpointRecord& c);
  void flush();
  const std::string& failure() const { return failure_; }

 private:
  void each(const std::function<void(MetricSink&)>& call);
  std::vector<std::unique_ptr<MetricSink>> sinks_;
  std::string failure_;
};

}  // namespace tessel::train
