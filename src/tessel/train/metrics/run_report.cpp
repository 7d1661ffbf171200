// SPDX-License-Identifier: Apache-2.0
// `tessel report` (run_report.h): reading a run directory — the JSONL log, the newest
// checkpoint's configuration, model and layout, the pipeline timeline — and assembling the page.
// The SVG itself is run_report_svg.cpp.
#include "tessel/train/metrics/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "tessel/core/error.h"
#include "tessel/io/mapped_file.h"
#include "tessel/models/family.h"
#include "tessel/train/checkpoint/checkpoint.h"
#include "tessel/train/checkpoint/checkpoint_pieces.h"
#include "tessel/train/config.h"

namespace tessel::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "report: cannot read ", path.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string fixed(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

// What the newest checkpoint says about the run; each part absent when it cannot be read.
struct RunInfo {
  std::string checkpoint;
  std::optional<TrainConfig> config;
  std::string model;  // "GPT-2 (12 layers, ...), 124,439,808 parameters"
  json layout;        // pieces_index.json's {"dp", "tp", "pp", "zero_stage", "sequence_parallel"}
  std::vector<std::string> notes;  // what could not be read, shown under the table
};

RunInfo read_run_info(const fs::path& run_dir) {
  RunInfo info;
  const std::vector<CheckpointInfo> checkpoints = list_checkpoints(run_dir.string());
  if (checkpoints.empty()) {
    info.notes.push_back("no committed checkpoint: configuration, model and layout unknown");
    return info;
  }
  const fs::path dir = checkpoints.back().path;
  info.checkpoint = dir.string();
  try {
    info.config =
        TrainConfig::parse(read_text(dir / "train.toml"), {}, (dir / "train.toml").string());
  } catch (const Error& e) {
    info.notes.push_back(std::string("configuration: ") + e.what());
  }
  try {
    const models::ConfigPtr mc = models::load_model_config((dir / "config.json").string());
    info.model = mc->summary() + ", " + with_commas(mc->parameter_count()) + " parameters";
  } catch (const Error& e) {
    info.notes.push_back(std::string("model: ") + e.what());
  }
  if (fs::exists(dir / kPieceIndexFile)) {
    const json index = json::parse(read_text(dir / kPieceIndexFile), nullptr, false);
    if (!index.is_discarded() && index.is_object() && index.contains("layout"))
      info.layout = index["layout"];
  }
  return info;
}

void add_row(std::string& html, const std::string& key, const std::string& value) {
  html += "<tr><th>" + html_escape(key) + "</th><td>" + html_escape(value) + "</td></tr>\n";
}

const Series* find(const RunMetrics& m, const std::string& name) {
  const auto it = m.series.find(name);
  return it == m.series.end() ? nullptr : &it->second;
}

std::optional<double> last_of(const RunMetrics& m, const std::string& name) {
  const Series* s = find(m, name);
  if (!s || s->y.empty()) return std::nullopt;
  return s->y.back();
}

// The mean of a series after its first point (the first step carries warm-up costs).
std::optional<double> steady_mean(const RunMetrics& m, const std::string& name) {
  const Series* s = find(m, name);
  if (!s || s->y.empty()) return std::nullopt;
  const size_t from = s->y.size() > 1 ? 1 : 0;
  double sum = 0;
  for (size_t i = from; i < s->y.size(); ++i) sum += s->y[i];
  return sum / double(s->y.size() - from);
}

std::string run_table(const fs::path& run_dir, const RunInfo& info, const RunMetrics& m) {
  std::string t = "<table class=\"run\">\n";
  add_row(t, "run directory", run_dir.string());
  if (!info.model.empty()) add_row(t, "model", info.model);
  const TrainConfig* c = info.config ? &*info.config : nullptr;
  if (!info.layout.is_null()) {
    const json& l = info.layout;
    const int pp = l.value("pp", 1);
    std::string layout = "dp " + std::to_string(l.value("dp", 1)) + " × tp " +
                         std::to_string(l.value("tp", 1)) + " × pp " + std::to_string(pp) +
                         ", ZeRO stage " + std::to_string(l.value("zero_stage", 0)) +
                         (l.value("sequence_parallel", false) ? ", sequence parallel" : "");
    if (pp > 1 && c) layout += ", schedule " + c->parallel.schedule;
    add_row(t, "layout", layout);
  }
  if (c) {
    add_row(t, "batch",
            "micro_batch " + std::to_string(c->train.micro_batch) + " × seq_len " +
                std::to_string(c->train.seq_len) + " × grad_accum " +
                std::to_string(c->train.grad_accum) + " per data-parallel rank");
    add_row(t, "precision", c->train.precision + ", recompute " + c->train.recompute);
    add_row(t, "optimizer",
            "AdamW, lr " + fixed("%g", c->optim.lr) + " (" + c->optim.decay + ", warmup " +
                std::to_string(c->optim.warmup_steps) + "), weight decay " +
                fixed("%g", c->optim.weight_decay));
  }
  add_row(t, "steps",
          std::to_string(m.last_step) + " of " + std::to_string(m.steps) + " (" +
              std::to_string(m.skipped_steps.size()) + " skipped)");
  add_row(t, "tokens trained", with_commas(m.tokens));
  if (const auto v = last_of(m, "loss")) add_row(t, "last training loss", fixed("%.4f", *v));
  if (const auto v = last_of(m, "val_loss")) add_row(t, "last validation loss", fixed("%.4f", *v));
  if (const auto v = steady_mean(m, "tokens_per_s"))
    add_row(t, "tokens/s (mean after step 1)", fixed("%.0f", *v));
  if (const auto v = steady_mean(m, "mfu"))
    add_row(t, "MFU (mean after step 1)", fixed("%.1f%%", 100 * *v));
  if (const auto v = last_of(m, "mem_peak_bytes"))
    add_row(t, "peak memory (leader rank)", fixed("%.1f MiB", *v / 1048576.0));
  if (!info.checkpoint.empty()) add_row(t, "newest checkpoint", info.checkpoint);
  t += "</table>\n";
  for (const std::string& note : info.notes)
    t += "<p class=\"note\">" + html_escape(note) + "</p>\n";
  return t;
}

constexpr const char* kStyle = R"(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 12px; } h2 { font-size: 16px; margin: 24px 0 8px; }
table.run { border-collapse: collapse; } table.run th, table.run td { padding: 3px 10px; }
table.run th { text-align: left; font-weight: 600; color: #555; }
table.run tr:nth-child(odd) { background: #f5f5f5; } p.note { color: #a33; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
svg { background: #fff; border: 1px solid #ddd; font: 11px system-ui, sans-serif; }
svg .title { font-size: 13px; font-weight: 600; fill: #222; } svg .tick, svg .legend { fill: #444; }
svg .label { fill: #666; } svg .grid { stroke: #eee; } svg .frame, svg .tickmark { stroke: #888; }
svg .line { fill: none; stroke-width: 1.6; } svg .marker { stroke: none; }
svg .skipped { stroke: #d62728; stroke-dasharray: 3 3; stroke-width: 1; }
svg .s0 { stroke: #1f77b4; fill: #1f77b4; } svg .s1 { stroke: #d62728; fill: #d62728; }
svg .s2 { stroke: #2ca02c; fill: #2ca02c; } svg .s3 { stroke: #9467bd; fill: #9467bd; }
svg polyline.line { fill: none; }
svg .fwd { fill: #6baed6; } svg .bwd { fill: #fd8d3c; } svg .msg { fill: #bbb; }
svg .fwd, svg .bwd { stroke: #fff; stroke-width: 0.5; } svg .boxlabel { font-size: 9px; fill: #111; }
)";

}  // namespace

RunMetrics read_run_metrics(const std::string& jsonl_path) {
  std::ifstream in(jsonl_path);
  TESSEL_CHECK(in.good(), "report: cannot read the JSONL log ", jsonl_path);
  std::map<std::string, std::map<int64_t, double>> points;  // field -> step -> value (last wins)
  std::map<int64_t, bool> skipped;
  RunMetrics m;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, false);
    const std::string where = jsonl_path + ":" + std::to_string(number);
    TESSEL_CHECK(!j.is_discarded() && j.is_object(), "report: ", where,
                 ": not a JSON object: ", line.substr(0, 80));
    const bool is_step = j.contains("step"), is_eval = j.contains("eval_step");
    if (!is_step && !is_eval) continue;  // a line of another program
    const char* key = is_step ? "step" : "eval_step";
    TESSEL_CHECK(j[key].is_number_integer(), "report: ", where, ": \"", key, "\" is ",
                 j[key].dump(), ", expected an integer");
    const int64_t step = j[key].get<int64_t>();
    for (const auto& [field, value] : j.items()) {
      if (field == key || value.is_null()) continue;  // null: not finite (a skipped step's loss)
      if (value.is_number()) {
        points[field][step] = value.get<double>();
      } else if (value.is_string()) {
        TESSEL_FAIL("report: ", where, ": \"", field, "\" is the string ", value.dump(),
                    ", expected a number or null");
      }
    }
    if (!is_step) {
      ++m.eval_records;
      continue;
    }
    ++m.step_records;
    try {
      skipped[step] = j.value("skipped", false);
      m.steps = j.value("steps", m.steps);
      if (step >= m.last_step) {
        m.last_step = step;
        m.tokens = j.value("tokens", m.tokens);
      }
    } catch (const json::exception& e) {
      TESSEL_FAIL("report: ", where, ": \"skipped\", \"steps\" or \"tokens\" has the wrong type (",
                  e.what(), ")");
    }
  }
  TESSEL_CHECK(!in.bad(), "report: error reading ", jsonl_path);
  for (const auto& [field, by_step] : points) {
    Series& s = m.series[field];
    for (const auto& [step, v] : by_step) {
      if (!std::isfinite(v)) continue;
      s.x.push_back(double(step));
      s.y.push_back(v);
    }
  }
  for (const auto& [step, was_skipped] : skipped)
    if (was_skipped) m.skipped_steps.push_back(step);
  return m;
}

PipelineTimeline read_pipeline_timeline(const std::string& path) {
  const json j = json::parse(read_text(path), nullptr, false);
  TESSEL_CHECK(
      !j.is_discarded() && j.is_object() && j.value("format", "") == "tessel-pipeline-timeline",
      "report: ", path, " is not a tessel-pipeline-timeline JSON file");
  PipelineTimeline t;
  try {
    t.step = j.at("step").get<int64_t>();
    t.schedule = j.value("schedule", "");
    t.stages = j.value("stages", 0);
    t.microbatches = j.value("microbatches", int64_t(0));
    t.makespan_ms = j.at("makespan_ms").get<double>();
    t.bubble_fraction = j.value("bubble_fraction", 0.0);
    for (const json& rank : j.at("ranks")) {
      auto& actions = t.ranks.emplace_back();
      for (const json& a : rank) {
        actions.push_back({a.at("kind").get<std::string>(), a.at("stage").get<int>(),
                           a.at("microbatch").get<int>(), a.at("start").get<double>(),
                           a.at("end").get<double>()});
      }
    }
  } catch (const json::exception& e) {
    TESSEL_FAIL("report: ", path, " is malformed: ", e.what());
  }
  return t;
}

std::string run_report_html(const std::string& run_dir_name) {
  const fs::path run_dir = run_dir_name;
  TESSEL_CHECK(fs::is_directory(run_dir), "report: ", run_dir_name,
               " is not a run directory (no such directory; give the checkpoint.dir of a run)");
  const RunInfo info = read_run_info(run_dir);
  const std::string jsonl_name = info.config ? info.config->log.jsonl : TrainConfig{}.log.jsonl;
  TESSEL_CHECK(!jsonl_name.empty(), "report: the run in ", run_dir_name,
               " wrote no JSONL log (log.jsonl = \"\"): there is nothing to plot");
  const fs::path jsonl = run_dir / jsonl_name;
  TESSEL_CHECK(fs::is_regular_file(jsonl), "report: ", jsonl.string(),
               " not found: tessel report reads the JSONL log a run writes (log.jsonl)");
  const RunMetrics m = read_run_metrics(jsonl.string());
  TESSEL_CHECK(m.step_records > 0, "report: ", jsonl.string(), " holds no step record");

  const std::string name = fs::absolute(run_dir).lexically_normal().filename().string();
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<title>tessel report: " + html_escape(name) + "</title>\n<style>" + std::string(kStyle) +
          "</style>\n</head>\n<body>\n";
  html += "<h1>tessel report: " + html_escape(name) + "</h1>\n";
  html += run_table(run_dir, info, m);
  html += "<h2>Curves</h2>\n<div class=\"plots\">\n";
  auto line = [&](const std::string& series, const std::string& label, double scale = 1) {
    return PlotLine{series, label, find(m, series), scale};
  };
  html +=
      svg_plot("loss", "Loss", {line("loss", "training loss"), line("val_loss", "validation loss")},
               m.skipped_steps);
  html += svg_plot("lr", "Learning rate", {line("lr", "learning rate")});
  html += svg_plot("grad_norm", "Gradient norm (before clipping)", {line("grad_norm", "norm")});
  html += svg_plot("tokens_per_s", "Throughput (tokens/s)", {line("tokens_per_s", "tokens/s")});
  std::vector<PlotLine> utilisation = {line("mfu", "MFU %", 100)};
  const Series *mfu = find(m, "mfu"), *hfu = find(m, "hfu");
  if (mfu && hfu && mfu->y != hfu->y) utilisation.push_back(line("hfu", "HFU %", 100));
  html += svg_plot("mfu", "Model FLOPs utilisation (%)", utilisation);
  html += svg_plot(
      "memory", "Memory of the leader rank (MiB)",
      {line("mem_bytes", "in use", 1.0 / 1048576), line("mem_peak_bytes", "peak", 1.0 / 1048576)});
  html += "</div>\n";
  const fs::path timeline_path = run_dir / kPipelineTimelineFile;
  if (fs::is_regular_file(timeline_path)) {
    const PipelineTimeline t = read_pipeline_timeline(timeline_path.string());
    html += "<h2>Pipeline timeline</h2>\n<p>Step " + std::to_string(t.step) + ", schedule " +
            html_escape(t.schedule) + ", " + std::to_string(t.stages) + " stages over " +
            std::to_string(t.ranks.size()) + " ranks, " + std::to_string(t.microbatches) +
            " micro-batches: " + fixed("%.1f ms", t.makespan_ms) + ", bubble " +
            fixed("%.1f%%", 100 * t.bubble_fraction) +
            " (boxes: F forward, B backward, by micro-batch; grey bars: sends and receives)</p>\n";
    html += svg_timeline(t);
  }
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  html += "<p class=\"footer\">Written by tessel report from " + html_escape(jsonl.string()) +
          " (" + std::to_string(m.step_records) + " steps, " + std::to_string(m.eval_records) +
          " evaluations) on " + when + ".</p>\n</body>\n</html>\n";
  return html;
}

std::string write_run_report(const std::string& run_dir, const std::string& out) {
  const std::string html = run_report_html(run_dir);
  const std::string path = out.empty() ? (fs::path(run_dir) / kReportFile).string() : out;
  io::write_file_atomic(path, html.data(), html.size());
  return path;
}

}  // namespace tessel::train
