// SPDX-License-Identifier: Apache-2.0
// `tessel report RUN_DIR`: one self-contained HTML page about a training run — no scripts, fonts
// or images from elsewhere, inline CSS, static inline SVG that renders without JavaScript. It
// reads the run directory the trainer leaves: the JSONL log (log.jsonl, every step and evaluation),
// the newest checkpoint's train.toml, config.json, state.json and pieces_index.json (the
// configuration, the model and the layout it was written in), and pipeline_timeline.json (the
// last step of a pipelined run, per pp rank). The page holds a table of the run, one
// `<svg class="plot" data-metric="...">` per curve — loss with validation loss, learning rate,
// gradient norm, tokens/s, MFU, memory in use and peak — each with axes, tick labels and one
// `<polyline data-series="...">` per series, and for a pipelined run the timeline as a Gantt chart
// (`<svg class="timeline">`, one row per rank, a box per forward and backward).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessel::train {

inline constexpr const char* kPipelineTimelineFile = "pipeline_timeline.json";  // in the run dir
inline constexpr const char* kReportFile = "report.html";

// One curve in step order; a step whose value is null or not finite has no point.
struct Series {
  std::vector<double> x, y;
};

// The records of a JSONL log: series by field name — every numeric field of the step records
// ("loss", "lr", "grad_norm", "tokens_per_s", "mfu", "mem_bytes", ...) and of the evaluations
// ("val_loss", ...); a step recorded twice keeps its last record.
struct RunMetrics {
  std::map<std::string, Series> series;
  std::vector<int64_t> skipped_steps;
  int64_t steps = 0;      // the run's train.steps, from the last step record
  int64_t last_step = 0;  // the last step recorded
  int64_t tokens = 0;     // trained by then
  int64_t step_records = 0, eval_records = 0;
};
// An Error naming the file when it cannot be read, and the file and line number of a line that is
// not a JSON object or holds a field of the wrong type. Lines of other programs (objects without
// "step" or "eval_step") are skipped.
RunMetrics read_run_metrics(const std::string& jsonl_path);

// One measured pipeline step (kPipelineTimelineFile, written by the leader after the last step).
struct TimelineAction {
  std::string kind;  // F, B, SendA, RecvA, SendG, RecvG
  int stage = 0, microbatch = 0;
  double start = 0, end = 0;  // ms from the step's start
};
struct PipelineTimeline {
  int64_t step = 0;
  std::string schedule;
  int stages = 0;
  int64_t microbatches = 0;
  double makespan_ms = 0, bubble_fraction = 0;
  std::vector<std::vector<TimelineAction>> ranks;  // per pp rank, in execution order
};
PipelineTimeline read_pipeline_timeline(const std::string& path);  // an Error naming the file

// One series of a plot, drawn with its label in the legend; values are multiplied by `scale`.
struct PlotLine {
  std::string series, label;
  const Series* data = nullptr;
  double scale = 1;
};
// `<svg class="plot" data-metric="metric">`: a title, x (step) and y axes with tick labels, one
// polyline per line with at least one point, markers where a line has few points, and dashed
// marks at `skipped` steps.
std::string svg_plot(const std::string& metric, const std::string& title,
                     const std::vector<PlotLine>& lines, const std::vector<int64_t>& skipped = {});
// `<svg class="timeline">`: one row per rank, a box per forward (class fwd) and backward (bwd),
// thin bars for the message actions, and a time axis in ms.
std::string svg_timeline(const PipelineTimeline& timeline);

// `s` with &, <, > and " as entities: safe in HTML text and attribute values.
std::string html_escape(const std::string& s);

// The page for `run_dir`. An Error when run_dir is not a directory or holds no JSONL log.
std::string run_report_html(const std::string& run_dir);
// Writes the page atomically to `out` ("": run_dir/report.html); returns the path written.
std::string write_run_report(const std::string& run_dir, const std::string& out = "");

}  // namespace tessel::train
