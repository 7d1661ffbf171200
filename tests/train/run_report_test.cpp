// SPDX-License-Identifier: Apache-2.0
// The run report as a library: synthetic JSONL logs of odd lengths (7 and 13 steps) with a
// skipped step whose loss is null give every plot a polyline of finite points; evaluations,
// skipped steps and HFU show where they should; a pipeline timeline becomes a Gantt chart; a real
// run's checkpoint fills the table; and bad input is one Error naming the file (and line).
// Rendering in a browser: tests/train/report_check.py.
#include "tessel/train/metrics/run_report.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>

#include "common/error_text.h"
#include "tessel/core/error.h"
#include "tessel/train/trainer.h"
#include "trainer_test_util.h"

namespace tessel::train {
namespace {

using test::scratch;
namespace fs = std::filesystem;

// A JSONL of `steps` steps, step `skip` skipped (loss and grad_norm null), evaluations every 4
// steps and at the end.
void write_log(const fs::path& dir, int64_t steps, int64_t skip, bool hfu = false) {
  std::ofstream out(dir / "train.jsonl");
  for (int64_t s = 1; s <= steps; ++s) {
    nlohmann::json j{{"step", s},
                     {"steps", steps},
                     {"loss", 6.0 / double(s)},
                     {"lr", 1e-3 * double(std::min<int64_t>(s, 3)) / 3},
                     {"grad_norm", 0.9},
                     {"skipped", s == skip},
                     {"tokens", 64 * s},
                     {"tokens_per_s", 900.0 + double(s % 3)},
                     {"mfu", 0.2},
                     {"hfu", hfu ? 0.25 : 0.2},
                     {"mem_bytes", 3 << 20},
                     {"mem_peak_bytes", (4 << 20) + s},
                     {"collectives", {{"all_reduce", 2}}}};
    if (s == skip) j["loss"] = j["grad_norm"] = nullptr;
    out << j.dump() << "\n";
    if (s % 4 == 0 || s == steps)
      out << nlohmann::json{{"eval_step", s}, {"val_loss", 5.0 / double(s)}}.dump() << "\n";
  }
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The value of attribute `name` in the tag starting at `tag`.
std::string attribute(const std::string& html, size_t tag, const std::string& name) {
  const size_t end = html.find('>', tag);
  const size_t at = html.find(" " + name + "=\"", tag);
  if (at == std::string::npos || at > end) return "";
  const size_t from = at + name.size() + 3;
  return html.substr(from, html.find('"', from) - from);
}

// data-series -> number of points, for each plot (data-metric) of the page.
std::map<std::string, std::map<std::string, int>> plots_of(const std::string& html) {
  std::map<std::string, std::map<std::string, int>> out;
  for (size_t at = html.find("<svg class=\"plot\""); at != std::string::npos;
       at = html.find("<svg class=\"plot\"", at + 1)) {
    auto& series = out[attribute(html, at, "data-metric")];
    const size_t end = html.find("</svg>", at);
    for (size_t l = html.find("<polyline", at); l < end; l = html.find("<polyline", l + 1)) {
      const std::string points = attribute(html, l, "points");
      EXPECT_EQ(points.find_first_not_of("0123456789., -"), std::string::npos) << points;
      series[attribute(html, l, "data-series")] = count(points, ",");
    }
  }
  return out;
}

using tessel::test::error_of;

TEST(RunReport, EveryPlotHasFinitePointsOnOddStepCountsWithASkippedStep) {
  for (const auto& [steps, skip] : {std::pair<int64_t, int64_t>{7, 5}, {13, 2}}) {
    const auto dir = scratch("report_synth_" + std::to_string(steps));
    write_log(dir, steps, skip);
    const std::string html = run_report_html(dir.string());
    const auto plots = plots_of(html);
    const int n = int(steps);
    using Want = std::map<std::string, std::map<std::string, int>>;
    const int evals = int(steps / 4) + (steps % 4 != 0 ? 1 : 0);
    EXPECT_EQ(plots, (Want{{"loss", {{"loss", n - 1}, {"val_loss", evals}}},
                           {"lr", {{"lr", n}}},
                           {"grad_norm", {{"grad_norm", n - 1}}},
                           {"tokens_per_s", {{"tokens_per_s", n}}},
                           {"mfu", {{"mfu", n}}},
                           {"memory", {{"mem_bytes", n}, {"mem_peak_bytes", n}}}}))
        << steps;
    EXPECT_EQ(html.find("nan"), std::string::npos);
    EXPECT_NE(html.find("step " + std::to_string(skip) + " skipped"), std::string::npos);
    EXPECT_NE(html.find("no committed checkpoint"), std::string::npos);  // said, not fatal
    EXPECT_EQ(html.find("<script"), std::string::npos);
    EXPECT_EQ(count(html, "http"), count(html, "http://www.w3.org/2000/svg"));  // no external
    EXPECT_EQ(html.find("class=\"timeline\""), std::string::npos);              // not pipelined
  }
}

TEST(RunReport, HfuIsDrawnBesideMfuWhenRecomputationMakesThemDiffer) {
  const auto dir = scratch("report_hfu");
  write_log(dir, 6, 0, true);
  EXPECT_EQ(plots_of(run_report_html(dir.string()))["mfu"],
            (std::map<std::string, int>{{"mfu", 6}, {"hfu", 6}}));
}

TEST(RunReport, PipelineTimelineIsAGanttChartWithARowPerRank) {
  const auto dir = scratch("report_timeline");
  write_log(dir, 3, 0);
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < 2; ++r) {
    nlohmann::json actions = nlohmann::json::array();
    for (int mb = 0; mb < 3; ++mb) {
      actions.push_back({{"kind", "F"},
                         {"stage", r},
                         {"microbatch", mb},
                         {"start", mb + r},
                         {"end", mb + r + 0.9}});
      actions.push_back({{"kind", r == 0 ? "SendA" : "RecvA"},
                         {"stage", 0},
                         {"microbatch", mb},
                         {"start", mb + 0.9},
                         {"end", mb + 1.0}});
    }
    for (int mb = 0; mb < 3; ++mb)
      actions.push_back(
          {{"kind", "B"}, {"stage", r}, {"microbatch", mb}, {"start", 6 + mb}, {"end", 6.8 + mb}});
    ranks.push_back(actions);
  }
  std::ofstream(dir / kPipelineTimelineFile) << nlohmann::json{
      {"format", "tessel-pipeline-timeline"},
      {"version", 1},
      {"step", 3},
      {"schedule", "gpipe"},
      {"stages", 2},
      {"microbatches", 3},
      {"makespan_ms", 8.8},
      {"bubble_fraction", 0.3},
      {"ranks", ranks}}.dump();
  const std::string html = run_report_html(dir.string());
  ASSERT_NE(html.find("<svg class=\"timeline\" data-ranks=\"2\" data-stages=\"2\""),
            std::string::npos);
  EXPECT_EQ(count(html, "<rect class=\"fwd"), 6);
  EXPECT_EQ(count(html, "<rect class=\"bwd"), 6);
  EXPECT_EQ(count(html, "<rect class=\"msg\""), 6);
  EXPECT_EQ(count(html, "<g class=\"rank\""), 2);
  EXPECT_NE(html.find("schedule gpipe"), std::string::npos);
}

TEST(RunReport, ARealRunFillsTheTableFromItsCheckpoint) {
  const auto dir = scratch("report_run");
  TrainConfig c = test::base_config(dir, 37, 3);
  TrainerHooks h;
  h.print = [](const std::string&) {};
  Trainer(c, "", h).run();
  const std::string out = (dir / "page.html").string();
  EXPECT_EQ(write_run_report(c.checkpoint.dir, out), out);
  std::ifstream in(out);
  const std::string html((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(html.find("dp 1 × tp 1 × pp 1, ZeRO stage 0"), std::string::npos);
  EXPECT_NE(html.find(" parameters</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>steps</th><td>3 of 3 (0 skipped)</td>"), std::string::npos);
  EXPECT_NE(html.find("step_000003"), std::string::npos);
  EXPECT_EQ(plots_of(html).size(), 6u);
  EXPECT_EQ(write_run_report(c.checkpoint.dir),
            (fs::path(c.checkpoint.dir) / kReportFile).string());
}

TEST(RunReport, BadInputIsOneErrorNamingTheFileAndLine) {
  const auto dir = scratch("report_bad");
  std::string e = error_of([&] { run_report_html((dir / "nope").string()); });
  EXPECT_NE(e.find((dir / "nope").string() + " is not a run directory"), std::string::npos) << e;
  e = error_of([&] { run_report_html(dir.string()); });
  EXPECT_NE(e.find((dir / "train.jsonl").string() + " not found"), std::string::npos) << e;
  write_log(dir, 4, 0);
  std::ofstream(dir / "train.jsonl", std::ios::app) << "{\"step\": 5, \"loss\": 1.0\n";
  e = error_of([&] { run_report_html(dir.string()); });
  EXPECT_NE(e.find((dir / "train.jsonl").string() + ":6: not a JSON object"), std::string::npos)
      << e;
  write_log(dir, 2, 0);
  std::ofstream(dir / "train.jsonl", std::ios::app) << "{\"step\": 3, \"loss\": \"low\"}\n";
  e = error_of([&] { run_report_html(dir.string()); });
  EXPECT_NE(e.find("train.jsonl:4: \"loss\" is the string \"low\""), std::string::npos) << e;
  std::ofstream(dir / "train.jsonl", std::ios::trunc) << "{\"note\": \"not a record\"}\n";
  e = error_of([&] { run_report_html(dir.string()); });
  EXPECT_NE(e.find("holds no step record"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessel::train
