// SPDX-License-Identifier: Apache-2.0
// Training runs on a composed layout in one process (a thread world shaped as `--dp A --tp B
// --pp C`), their per-rank step records, and the distance between two runs' final models: shared
// by the tests that compare layouts with one process (precision_layout_test.cpp,
// precision_llama_test.cpp), and their fp16 check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_checks.h"
#include "tessel/io/safetensors.h"
#include "tessel/train/layout.h"
#include "tessel/train/trainer.h"

namespace tessel::train::test {

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int zero = 0;
  bool sp = false;
  std::string schedule = "1f1b";
  std::string str() const {
    return "(" + std::to_string(dp) + "," + std::to_string(tp) + "," + std::to_string(pp) +
           ") zero " + std::to_string(zero) + (sp ? " sp" : "") + " " + schedule;
  }
};

struct LayoutRun {
  std::vector<StepRecord> steps[8];  // per world rank
  std::string checkpoint;            // world rank 0's last
};

constexpr int64_t kSteps = 8;
constexpr int64_t kRows = 4;  // per micro-batch, over every dp rank

inline TrainConfig layout_config(const TrainConfig& base, const Layout& l,
                                 const std::string& name) {
  TrainConfig c = base;
  c.train.micro_batch = kRows / l.dp;
  c.parallel.zero_stage = l.zero;
  c.parallel.sequence_parallel = l.sp;
  c.parallel.schedule = l.schedule;
  c.checkpoint.dir = (std::filesystem::path(base.checkpoint.dir).parent_path() / name).string();
  return c;
}

// `inject(trainer, world rank, step)` runs after each step's gradients are complete.
inline LayoutRun train_on(const TrainConfig& c, const Layout& l,
                          std::function<void(Trainer&, int, int64_t)> inject = {}) {
  LayoutRun out;
  std::mutex mu;
  const int world_size = l.dp * l.tp * l.pp;
  auto body = [&](dist::CommPtr world) {
    const int rank = world ? world->rank() : 0;
    TrainerHooks h;
    h.print = [](const std::string&) {};
    h.on_step = [&out, rank](const StepRecord& r) { out.steps[rank].push_back(r); };
    Trainer* self = nullptr;
    if (inject) h.after_backward = [&, rank](int64_t step) { inject(*self, rank, step); };
    Trainer trainer(c, "", h, world ? make_layout(world, l.dp, l.tp, l.pp) : TrainLayout{});
    self = &trainer;
    const TrainSummary s = trainer.run();
    std::lock_guard<std::mutex> lock(mu);
    if (rank == 0) out.checkpoint = s.last_checkpoint;
  };
  if (world_size == 1) {
    body(nullptr);
  } else {
    tessel::test::run_thread_world(world_size, body);
  }
  return out;
}

// Relative L2 distance of two checkpoints' whole models (every layout writes the full tensors).
inline double param_distance(const std::string& a, const std::string& b) {
  const auto fa = io::SafetensorsFile::open(a + "/model.safetensors");
  const auto fb = io::SafetensorsFile::open(b + "/model.safetensors");
  EXPECT_EQ(fa.names(), fb.names());
  double diff = 0, norm = 0;
  for (const std::string& name : fa.names()) {
    const std::vector<float> x = fa.load(name, DType::F32).to_vector<float>();
    const std::vector<float> y = fb.load(name, DType::F32).to_vector<float>();
    if (x.size() != y.size()) return INFINITY;
    for (size_t i = 0; i < x.size(); ++i) {
      diff += double(x[i] - y[i]) * double(x[i] - y[i]);
      norm += double(x[i]) * double(x[i]);
    }
  }
  return std::sqrt(diff / norm);
}

// fp16 on `layout` follows one process through loss-scale changes: from an initial scale of
// 1024 doubled every 2 clean steps, 6 steps on every rank keep one process's scales, skip none,
// and stay within `loss_tol` of its losses; the scale ends at 4096 (the window was exercised).
inline void expect_fp16_follows_one_process(TrainConfig base, const Layout& layout,
                                            double loss_tol) {
  base.train.steps = 6;
  base.train.precision = "fp16";
  base.train.loss_scale_init = 1024;
  base.train.loss_scale_window = 2;
  const Layout one{};
  const LayoutRun a = train_on(layout_config(base, one, "fp16_one"), one);
  const LayoutRun b = train_on(layout_config(base, layout, "fp16_layout"), layout);
  ASSERT_EQ(a.steps[0].size(), 6u);
  for (int rank = 0; rank < layout.dp * layout.tp * layout.pp; ++rank) {
    ASSERT_EQ(b.steps[rank].size(), 6u) << layout.str() << " rank " << rank;
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(b.steps[rank][i].loss_scale, a.steps[0][i].loss_scale) << "step " << i + 1;
      EXPECT_FALSE(b.steps[rank][i].skipped) << "step " << i + 1;
      EXPECT_NEAR(b.steps[rank][i].loss, a.steps[0][i].loss, loss_tol * a.steps[0][i].loss)
          << layout.str() << " rank " << rank << " step " << i + 1;
    }
  }
  EXPECT_EQ(a.steps[0].back().loss_scale, 4096.0);
}

}  // namespace tessel::train::test
