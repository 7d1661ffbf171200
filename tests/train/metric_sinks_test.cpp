// SPDX-License-Identifier: Apache-2.0
// The metric sinks: the progress line's interval averages and when it prints, the fan-out that
// keeps the first failed write and stops feeding files after it, the TensorBoard scalars of a
// record, a resumed run's event files (the repeated steps cut), and a whole in-process run whose
// event file holds what its JSONL holds.
#include "tessel/train/metrics/metric_sinks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "tessel/core/error.h"
#include "tessel/train/trainer.h"
#include "trainer_test_util.h"

namespace tessel::train {
namespace {

using test::scratch;
namespace fs = std::filesystem;

StepRecord step_record(int64_t step, int64_t steps) {
  StepRecord r;
  r.step = step;
  r.steps = steps;
  r.loss = 5.0 - 0.1 * double(step);
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  r.step_ms = 100.0 * double(step);
  r.tokens_per_s = 1000.0 / (r.step_ms / 1e3);  // 1000 tokens per step
  r.mfu = 0.5;
  r.hfu = 0.5;
  r.mem_bytes = 1 << 20;
  r.mem_peak_bytes = 2 << 20;
  return r;
}

// Byte counts in the log at a readable scale: bytes, KiB, MiB, then GiB with two decimals.
TEST(FormatBytes, PicksTheUnitBySize) {
  EXPECT_EQ(format_bytes(13), "13 B");
  EXPECT_EQ(format_bytes(40960), "40 KiB");
  EXPECT_EQ(format_bytes(double(335544320)), "320 MiB");
  EXPECT_EQ(format_bytes(36.57e9), "34.06 GiB");
}

TEST(ProgressSink, PrintsAtStepOneEveryIntervalAndTheLastWithIntervalRates) {
  std::vector<std::string> lines;
  ProgressSink sink(3, 1000, [&lines](const std::string& l) { lines.push_back(l); });
  for (int64_t s = 1; s <= 7; ++s) sink.on_step(step_record(s, 7));
  ASSERT_EQ(lines.size(), 4u);  // steps 1, 3, 6, 7
  EXPECT_EQ(lines[0].rfind("step 1/7 |", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("step 3/7 |", 0), 0u) << lines[1];
  // Step 3's line covers steps 2 and 3: 2000 tokens in 500 ms; MFU scales with the rate.
  EXPECT_NE(lines[1].find("| 4000 tok/s |"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("MFU 60.0%"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("| 300.0 ms |"), std::string::npos) << lines[1];  // the step's own
  EXPECT_EQ(lines[3].rfind("step 7/7 |", 0), 0u) << lines[3];
  EXPECT_NE(lines[3].find("| 1429 tok/s |"), std::string::npos) << lines[3];  // step 7 alone
  EvalRecord e;
  e.step = 7;
  e.val_loss = 2.0;
  sink.on_eval(e);
  EXPECT_EQ(lines.back().rfind("eval step 7 | val loss 2.0000", 0), 0u) << lines.back();
}

// Records what it is given; throws on one step.
struct FakeSink : MetricSink {
  FakeSink(std::vector<int64_t>* seen, bool file, int64_t fail_at = -1)
      : seen(seen), file(file), fail_at(fail_at) {}
  void on_step(const StepRecord& r) override {
    if (r.step == fail_at) TESSEL_FAIL("fake: disk full at step ", r.step);
    seen->push_back(r.step);
  }
  void on_eval(const EvalRecord& e) override { seen->push_back(-e.step); }
  bool writes_file() const override { return file; }
  std::vector<int64_t>* seen;
  bool file;
  int64_t fail_at;
};

TEST(MetricSinks, KeepTheFirstFailureAndStopFeedingFilesAfterIt) {
  std::vector<int64_t> a, b, progress;
  MetricSinks sinks;
  sinks.add(std::make_unique<FakeSink>(&a, true, 3));
  sinks.add(std::make_unique<FakeSink>(&b, true, 5));
  sinks.add(std::make_unique<FakeSink>(&progress, false, 6));
  for (int64_t s = 1; s <= 6; ++s) sinks.on_step(step_record(s, 6));
  EvalRecord e;
  e.step = 6;
  sinks.on_eval(e);
  EXPECT_EQ(sinks.failure(), "fake: disk full at step 3");
  EXPECT_EQ(a, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(b, (std::vector<int64_t>{1, 2}));  // no record after a gap in another file
  EXPECT_EQ(progress, (std::vector<int64_t>{1, 2, 3, 4, 5, -6}));  // the terminal goes on
}

TEST(MetricSinks, TensorBoardScalarsLeaveOutValuesThatAreNotFinite) {
  StepRecord r = step_record(4, 10);
  r.loss = std::numeric_limits<double>::quiet_NaN();
  std::set<std::string> tags;
  for (const auto& v : step_scalars(r)) tags.insert(v.tag);
  EXPECT_EQ(tags, (std::set<std::string>{"train/lr", "train/grad_norm", "train/tokens_per_s",
                                         "train/mfu", "train/mem_bytes", "train/mem_peak_bytes"}));
  r.hfu = 0.6;
  r.loss_scale = 1024;
  EXPECT_EQ(step_scalars(r).size(), 8u);  // train/hfu and train/loss_scale too
  EvalRecord e;
  e.val_loss = 1.25;
  ASSERT_EQ(eval_scalars(e).size(), 1u);
  EXPECT_EQ(eval_scalars(e)[0].tag, "val/loss");
}

// step -> tags written at it, over every event file of `dir`; fails on a step written twice.
std::map<int64_t, std::set<std::string>> steps_in(const fs::path& dir, int* files) {
  std::map<int64_t, std::set<std::string>> out;
  *files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    ++*files;
    for (const io::Event& ev : io::read_event_file(entry.path().string()).events) {
      for (const auto& v : ev.values) {
        EXPECT_TRUE(out[ev.step].insert(v.tag).second) << v.tag << " twice at step " << ev.step;
      }
    }
  }
  return out;
}

TEST(TensorBoardSink, AResumedRunCutsTheStepsItRepeats) {
  const fs::path dir = scratch("tb_resume") / "tensorboard";
  EvalRecord e;
  e.val_loss = 1.5;
  {
    TensorBoardSink first(dir.string(), -1);
    for (int64_t s = 1; s <= 5; ++s) {
      first.on_step(step_record(s, 8));
      e.step = s;
      if (s % 2 == 0) first.on_eval(e);
    }
  }
  {
    TensorBoardSink resumed(dir.string(), 3);  // the checkpoint of step 3: steps 4, 5 again
    for (int64_t s = 4; s <= 8; ++s) resumed.on_step(step_record(s, 8));
  }
  int files = 0;
  const auto steps = steps_in(dir, &files);
  EXPECT_EQ(files, 2);
  ASSERT_EQ(steps.size(), 8u);  // 1..8, each once
  EXPECT_EQ(steps.begin()->first, 1);
  EXPECT_EQ(steps.at(2).count("val/loss"), 1u);
  EXPECT_EQ(steps.at(4).count("val/loss"), 0u);  // cut with the first file's step 4
  // A fresh run in the same folder starts over.
  { TensorBoardSink fresh(dir.string(), -1); }
  EXPECT_TRUE(steps_in(dir, &files).empty());
  EXPECT_EQ(files, 1);  // its own, holding the version record
}

TEST(TensorBoardSink, ATrainingRunWritesWhatItsJsonlHolds) {
  const auto dir = scratch("tb_run");
  TrainConfig c = test::base_config(dir, 37, 5);
  c.log.tensorboard = true;
  c.eval.interval = 2;
  TrainerHooks h;
  h.print = [](const std::string&) {};
  Trainer(c, "", h).run();
  std::map<int64_t, double> jsonl_loss, jsonl_val;
  std::ifstream in(dir / "run" / "train.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("step")) jsonl_loss[j["step"]] = j["loss"].get<double>();
    if (j.contains("eval_step")) jsonl_val[j["eval_step"]] = j["val_loss"].get<double>();
  }
  ASSERT_EQ(jsonl_loss.size(), 5u);
  ASSERT_EQ(jsonl_val.size(), 3u);  // steps 2, 4 and the end
  std::map<int64_t, double> tb_loss, tb_val;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir / "run" / kTensorBoardDir)) {
    ++files;
    for (const io::Event& ev : io::read_event_file(entry.path().string()).events)
      for (const auto& v : ev.values) {
        if (v.tag == "train/loss") tb_loss[ev.step] = v.value;
        if (v.tag == "val/loss") tb_val[ev.step] = v.value;
      }
  }
  EXPECT_EQ(files, 1);
  ASSERT_EQ(tb_loss.size(), jsonl_loss.size());
  for (const auto& [step, loss] : jsonl_loss) EXPECT_EQ(tb_loss[step], float(loss)) << step;
  ASSERT_EQ(tb_val.size(), jsonl_val.size());
  for (const auto& [step, loss] : jsonl_val) EXPECT_EQ(tb_val[step], float(loss)) << step;
}

}  // namespace
}  // namespace tessel::train
