// SPDX-License-Identifier: Apache-2.0
// The metric sinks of a training run (metric_sinks.h): the progress line's interval averages, the
// TensorBoard scalars of a record, and the fan-out that keeps the first failed write.
#include "tessel/train/metrics/metric_sinks.h"

#include <cmath>
#include <filesystem>
#include <utility>

#include "tessel/core/error.h"

namespace tessel::train {

namespace fs = std::filesystem;

ProgressSink::ProgressSink(int64_t interval, int64_t tokens_per_step, Print print)
    : interval_(interval), tokens_per_step_(tokens_per_step), print_(std::move(print)) {
  TESSEL_CHECK(interval_ >= 1, "ProgressSink: log.interval = ", interval_, ", expected >= 1");
}

void ProgressSink::on_step(const StepRecord& r) {
  interval_ms_ += r.step_ms;
  interval_tokens_ += double(tokens_per_step_);
  if (r.step % interval_ != 0 && r.step != r.steps && r.step != 1) return;
  StepRecord shown = r;  // rates averaged over the interval, values of this step
  shown.tokens_per_s = interval_tokens_ / (interval_ms_ / 1e3);
  shown.mfu = r.mfu > 0 ? r.mfu * shown.tokens_per_s / r.tokens_per_s : 0.0;
  shown.hfu = r.hfu > 0 ? r.hfu * shown.tokens_per_s / r.tokens_per_s : 0.0;
  print_(progress_line(shown));
  interval_ms_ = interval_tokens_ = 0;
}

void ProgressSink::on_eval(const EvalRecord& e) {
  print_(eval_line(e));
}

std::vector<io::ScalarValue> step_scalars(const StepRecord& r) {
  std::vector<io::ScalarValue> out;
  auto add = [&out](const char* tag, double v) {
    if (std::isfinite(v)) out.push_back({tag, float(v)});
  };
  add("train/loss", r.loss);
  add("train/lr", r.lr);
  add("train/grad_norm", r.grad_norm);
  add("train/tokens_per_s", r.tokens_per_s);
  if (r.mfu > 0) add("train/mfu", r.mfu);
  if (r.hfu != r.mfu) add("train/hfu", r.hfu);
  add("train/mem_bytes", double(r.mem_bytes));
  add("train/mem_peak_bytes", double(r.mem_peak_bytes));
  if (r.loss_scale > 0) add("train/loss_scale", r.loss_scale);
  return out;
}

std::vector<io::ScalarValue> eval_scalars(const EvalRecord& e) {
  std::vector<io::ScalarValue> out;
  if (std::isfinite(e.val_loss)) out.push_back({"val/loss", float(e.val_loss)});
  return out;
}

TensorBoardSink::TensorBoardSink(const std::string& dir, int64_t resume_step) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_regular_file() || name.rfind(io::kEventFilePrefix, 0) != 0) continue;
      io::truncate_event_file(entry.path().string(), resume_step);
    }
  }
  writer_ = io::EventFileWriter(dir);
}

void MetricSinks::each(const std::function<void(MetricSink&)>& call) {
  for (auto& sink : sinks_) {
    if (!failure_.empty() && sink->writes_file()) continue;
    try {
      call(*sink);
    } catch (const Error& e) {
      if (failure_.empty()) failure_ = e.what();
    }
  }
}

void MetricSinks::on_step(const StepRecord& r) {
  each([&r](MetricSink& s) { s.on_step(r); });
}

void MetricSinks::on_eval(const EvalRecord& e) {
  each([&e](MetricSink& s) { s.on_eval(e); });
}

void MetricSinks::on_checkpoint(const CheckpointRecord& c) {
  each([&c](MetricSink& s) { s.on_checkpoint(c); });
}

void MetricSinks::flush() {
  each([](MetricSink& s) { s.flush(); });
}

}  // namespace tessel::train
