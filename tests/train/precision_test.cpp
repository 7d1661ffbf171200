// SPDX-License-Identifier: Apache-2.0
// Mixed-precision training: bf16 and fp16 runs follow the fp32 loss curve of the same model and
// data within a stated tolerance while keeping f32 master weights; fp16's dynamic loss scale
// skips exactly the step whose gradients overflow and halves, grows again after its window, never
// counts toward train.max_bad_steps, and survives a checkpoint resume.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/thread_checks.h"
#include "tessel/train/layout.h"
#include "tessel/train/optim/loss_scaler.h"
#include "tessel/train/trainer.h"
#include "trainer_test_util.h"

namespace tessel::train {
namespace {

using test::base_config;
using test::scratch;

TrainerHooks quiet(std::vector<StepRecord>* steps) {
  TrainerHooks h;
  h.print = [](const std::string&) {};
  h.on_step = [steps](const StepRecord& r) { steps->push_back(r); };
  return h;
}

std::vector<StepRecord> train(TrainConfig c, const std::string& precision, const char* run) {
  c.train.precision = precision;
  c.checkpoint.dir = (std::filesystem::path(c.checkpoint.dir).parent_path() / run).string();
  std::vector<StepRecord> steps;
  Trainer trainer(c, "", quiet(&steps));
  trainer.run();
  for (const auto& [name, p] : trainer.model().named_parameters())
    EXPECT_EQ(p.dtype(), DType::F32) << name << ": master weights must stay f32";
  return steps;
}

double mean_loss(const std::vector<StepRecord>& s, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += s[i].loss;
  return sum / double(to - from);
}

// Tolerance: every 16-bit rounding of a weight copy or an activation is a relative error of at
// most 2^-9 (bf16) / 2^-12 (f16); over 100 steps these perturb the trajectory like a little
// extra gradient noise, not a bias. Measured on this model: the largest per-step difference from
// fp32 is 0.14% (bf16) and 0.015% (fp16), the last-20-step means agree to 0.02% / 0.003%. We
// allow about ten times that: the tail mean within 1% (bf16) / 0.2% (fp16), every step within
// 2% / 0.3%, while the curve itself falls from ln 37 = 3.6 to about 1.45. A run that trained
// wrongly (no gradient through the casts, an fp16 gradient left scaled) misses by far more.
void expect_tracks(const std::vector<StepRecord>& lo, const std::vector<StepRecord>& fp32,
                   double tail_tol, double step_tol) {
  ASSERT_EQ(lo.size(), fp32.size());
  const size_t n = fp32.size();
  const double tail32 = mean_loss(fp32, n - 20, n), tail = mean_loss(lo, n - 20, n);
  EXPECT_LT(tail32, 0.5 * fp32.front().loss) << "the fp32 reference must learn";
  EXPECT_NEAR(tail, tail32, tail_tol * tail32);
  bool differs = false;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_FALSE(lo[i].skipped) << "step " << i + 1;
    EXPECT_NEAR(lo[i].loss, fp32[i].loss, step_tol * fp32[i].loss) << "step " << i + 1;
    differs |= lo[i].loss != fp32[i].loss;
  }
  EXPECT_TRUE(differs) << "the low-precision run is bitwise the fp32 one: the casts did not run";
}

class Precision : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(scratch("precision"));
    config_ = new TrainConfig(base_config(*dir_, 37, 100));
    config_->optim.warmup_steps = 10;
    config_->train.threads = 1;  // a few hundred ms per run; no thread-pool noise
    fp32_ = new std::vector<StepRecord>(train(*config_, "fp32", "run_fp32"));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete fp32_;
    delete config_;
    delete dir_;
  }
  static std::filesystem::path* dir_;
  static TrainConfig* config_;
  static std::vector<StepRecord>* fp32_;
};
std::filesystem::path* Precision::dir_ = nullptr;
TrainConfig* Precision::config_ = nullptr;
std::vector<StepRecord>* Precision::fp32_ = nullptr;

TEST_F(Precision, Bf16TracksFp32LossCurve) {
  const auto bf16 = train(*config_, "bf16", "run_bf16");
  expect_tracks(bf16, *fp32_, 0.01, 0.02);
  EXPECT_EQ(bf16.back().loss_scale, 0.0);  // bf16 has f32's range: no scaling
}

TEST_F(Precision, Fp16TracksFp32LossCurve) {
  TrainConfig c = *config_;
  c.train.loss_scale_init = 1024;
  c.train.loss_scale_window = 30;
  const auto fp16 = train(c, "fp16", "run_fp16");
  expect_tracks(fp16, *fp32_, 0.002, 0.003);
  // No overflow at these scales: 100 steps in windows of 30 double 1024 three times.
  EXPECT_EQ(fp16.back().overflow_total, 0);
  EXPECT_EQ(fp16.back().loss_scale, 8192.0);
}

// The recomputed blocks read the same 16-bit weight copies (the scope outlives backward), so
// recomputation changes nothing: the same losses and gradient norms, bit for bit.
TEST_F(Precision, Bf16RecomputeGivesTheSameSteps) {
  TrainConfig c = *config_;
  c.train.steps = 6;
  c.optim.warmup_steps = 2;
  const auto none = train(c, "bf16", "run_bf16_none");
  for (const char* mode : {"selective", "full"}) {
    c.train.recompute = mode;
    const auto re = train(c, "bf16", (std::string("run_bf16_") + mode).c_str());
    ASSERT_EQ(re.size(), none.size());
    for (size_t i = 0; i < re.size(); ++i) {
      EXPECT_EQ(re[i].loss, none[i].loss) << mode << " step " << i + 1;
      EXPECT_EQ(re[i].grad_norm, none[i].grad_norm) << mode << " step " << i + 1;
    }
  }
}

// An overflow at step 3 (the fault drill puts a non-finite value into a gradient) skips exactly
// that step and halves the scale; 4 clean steps later it doubles. max_bad_steps = 1 would abort
// at the first bad step: overflow skips must not count.
TEST(PrecisionFp16, OverflowSkipsTheStepHalvesTheScaleAndTheWindowRegrowsIt) {
  const auto dir = scratch("overflow");
  TrainConfig c = base_config(dir, 37, 10);
  c.train.precision = "fp16";
  c.train.loss_scale_init = 256;
  c.train.loss_scale_window = 4;
  c.train.max_bad_steps = 1;
  c.fault.nan_at_step = 3;
  std::vector<StepRecord> s;
  Trainer trainer(c, "", quiet(&s));
  const TrainSummary sum = trainer.run();
  ASSERT_EQ(s.size(), 10u);
  const double want[] = {256, 256, 256, 128, 128, 128, 128, 256, 256, 256};
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].skipped, i == 2) << "step " << i + 1;
    EXPECT_EQ(s[i].overflow, i == 2) << "step " << i + 1;
    EXPECT_EQ(s[i].loss_scale, want[i]) << "step " << i + 1;
    EXPECT_EQ(s[i].overflow_total, i >= 2 ? 1 : 0) << "step " << i + 1;
  }
  EXPECT_EQ(sum.skipped_steps, 1);
  EXPECT_EQ(trainer.optimizer_steps(), 9);
  EXPECT_TRUE(std::isfinite(s[3].grad_norm));
  EXPECT_NE(step_json(s[2]).find("\"overflow\":true"), std::string::npos) << step_json(s[2]);
  EXPECT_NE(progress_line(s[3]).find("scale 128 (overflows 1)"), std::string::npos)
      << progress_line(s[3]);
}

// Gradients are averaged before the overflow check, so an inf on one rank reaches every rank
// anyway; here the inf is written after the averaging, on rank 1 only, so only the all-reduced
// overflow flag can make rank 0 skip the step too. Both ranks must skip step 3, halve the scale
// and end with the same parameters.
TEST(PrecisionFp16, OverflowOnOneDpRankSkipsTheStepOnEveryRank) {
  const auto dir = scratch("overflow_dp");
  TrainConfig c = base_config(dir, 37, 5);
  c.train.precision = "fp16";
  c.train.loss_scale_init = 256;
  c.train.threads = 1;
  std::vector<StepRecord> steps[2];
  std::vector<float> params[2];
  tessel::test::run_thread_world(2, [&](dist::CommPtr world) {
    const int rank = world->rank();
    TrainerHooks h;
    h.print = [](const std::string&) {};
    h.on_step = [&steps, rank](const StepRecord& r) { steps[rank].push_back(r); };
    Trainer* self = nullptr;
    h.after_backward = [&self, rank](int64_t step) {
      if (rank == 1 && step == 3)
        self->model().parameters().back().grad().data<float>()[0] =
            std::numeric_limits<float>::infinity();
    };
    Trainer trainer(c, "", h, data_parallel_layout(world));
    self = &trainer;
    trainer.run();
    params[rank] = trainer.model().parameters().front().to_vector<float>();
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(steps[rank].size(), 5u) << "rank " << rank;
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(steps[rank][i].skipped, i == 2) << "rank " << rank << " step " << i + 1;
      EXPECT_EQ(steps[rank][i].loss_scale, i <= 2 ? 256.0 : 128.0) << "rank " << rank;
    }
  }
  EXPECT_EQ(params[0], params[1]);
}

TEST(PrecisionFp16, CheckpointResumeKeepsTheLossScale) {
  const auto dir = scratch("scale_resume");
  TrainConfig c = base_config(dir, 37, 4);
  c.train.precision = "fp16";
  c.train.loss_scale_init = 512;
  c.train.loss_scale_window = 3;
  c.fault.nan_at_step = 2;  // 512 -> 256 at step 2; steps 3, 4 are 2 of the 3 clean ones
  std::vector<StepRecord> first, second;
  const TrainSummary s = Trainer(c, "", quiet(&first)).run();
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first.back().loss_scale, 256.0);
  TrainConfig more = c;
  more.train.steps = 6;
  more.fault = FaultSection{};
  Trainer resumed(more, s.last_checkpoint, quiet(&second));
  resumed.run();
  ASSERT_EQ(second.size(), 2u);
  // Step 5 is the third clean step of the window: it still runs at 256, then the scale doubles.
  EXPECT_EQ(second[0].loss_scale, 256.0);
  EXPECT_EQ(second[1].loss_scale, 512.0);
  EXPECT_EQ(second[1].overflow_total, 1);
}

TEST(LossScaler, HalvesOnOverflowDoublesAfterWindowAndRoundTripsItsState) {
  LossScaler s(8, 2);
  s.update(true);
  EXPECT_EQ(s.scale(), 4);
  s.update(false);
  EXPECT_EQ(s.scale(), 4);
  s.update(false);
  EXPECT_EQ(s.scale(), 8);
  EXPECT_EQ(s.overflows(), 1);
  s.update(false);
  LossScaler t(1, 5);
  t.from_json(s.to_json());
  EXPECT_EQ(t.scale(), 8);
  EXPECT_EQ(t.clean_steps(), 1);
  EXPECT_EQ(t.overflows(), 1);
  EXPECT_THROW(t.from_json(R"({"scale": -1, "clean_steps": 0, "overflows": 0})"), Error);
  EXPECT_THROW(LossScaler(0, 1), Error);
}

}  // namespace
}  // namespace tessel::train
