// SPDX-License-Identifier: Apache-2.0
// The planner's pipeline terms: the schedule's bubble (GPipe and 1F1B: (p-1)/(m+p-1) with equal
// stages, interleaved: (p-1)/(vm+p-1); Narayanan et al. 2021) and a pipeline rank's traced step,
// replayed from its action list: GPipe keeps all m micro-batches' activations, 1F1B fewer, and
// the stages together do the whole model's work.
#include <gtest/gtest.h>

#include <algorithm>

#include "tessel/core/error.h"
#include "tessel/models/family.h"
#include "tessel/plan/memory_model.h"
#include "tessel/plan/step_cost.h"
#include "tessel/plan/trace.h"

namespace tessel::plan {
namespace {

using K = PipelineActionKind;

TEST(PipelineTime, EqualStagesGiveThePublishedBubble) {
  for (const auto& [p, m] : {std::pair{2, 4}, {4, 8}, {3, 7}, {8, 1}, {5, 13}}) {
    const std::vector<double> busy(size_t(p), 0.37);
    const PipelineTime t = pipeline_time(busy, m, 1);
    EXPECT_NEAR(t.bubble_fraction, double(p - 1) / double(m + p - 1), 1e-12) << p << " " << m;
    EXPECT_NEAR(t.makespan, 0.37 * double(m + p - 1), 1e-12);
    for (int v : {2, 3}) {
      const PipelineTime iv = pipeline_time(busy, m, v);
      EXPECT_NEAR(iv.bubble_fraction, double(p - 1) / double(v * m + p - 1), 1e-12);
    }
  }
  EXPECT_DOUBLE_EQ(pipeline_time({1.0}, 5, 1).bubble_fraction, 0);
}

TEST(PipelineTime, TheSlowestRankSetsTheRhythm) {
  // Ranks busy 1, 3 and 2 per micro-batch over 4 micro-batches: 4 x 3 + (1 + 2).
  const PipelineTime t = pipeline_time({1, 3, 2}, 4, 1);
  EXPECT_DOUBLE_EQ(t.makespan, 15);
  EXPECT_DOUBLE_EQ(t.bubble_fraction, 1 - 4.0 * 6 / (3 * 15));
  EXPECT_THROW(pipeline_time({}, 4, 1), Error);
}

// Two ranks, stages {embedding, h.0, h.1} and {h.2, h.3, head} of the 4-block tiny GPT-2, m
// micro-batches,
// in the orders parallel/pipeline's generators make (receives before the compute that needs them,
// sends after the compute that makes them).
PipelineRank two_rank(int rank, bool gpipe, int m) {
  PipelineRank pr;
  pr.schedule = gpipe ? "gpipe" : "1f1b";
  pr.ranks = 2;
  pr.rank = rank;
  pr.microbatches = m;
  pr.stage_layers = {{0, 3}, {3, 6}};
  auto& a = pr.actions;
  if (rank == 0) {
    auto forward = [&](int i) {
      a.push_back({K::Forward, i, 0});
      a.push_back({K::SendActivation, i, 0});
    };
    auto backward = [&](int i) {
      a.push_back({K::RecvGradient, i, 1});
      a.push_back({K::Backward, i, 0});
    };
    if (gpipe) {
      for (int i = 0; i < m; ++i) forward(i);
      for (int i = 0; i < m; ++i) backward(i);
    } else {
      forward(0);  // p - 1 - rank = 1 warm-up forward, then one forward one backward
      for (int i = 1; i < m; ++i) {
        forward(i);
        backward(i - 1);
      }
      backward(m - 1);
    }
  } else {
    auto forward = [&](int i) {
      a.push_back({K::RecvActivation, i, 0});
      a.push_back({K::Forward, i, 1});
    };
    auto backward = [&](int i) {
      a.push_back({K::Backward, i, 1});
      a.push_back({K::SendGradient, i, 1});
    };
    if (gpipe) {
      for (int i = 0; i < m; ++i) forward(i);
      for (int i = 0; i < m; ++i) backward(i);
    } else {
      for (int i = 0; i < m; ++i) {
        forward(i);
        backward(i);
      }
    }
  }
  return pr;
}

TEST(PipelineTrace, GPipeHoldsEveryMicroBatch1F1BFewer) {
  const models::ConfigPtr config = models::family_named("gpt2").preset("tiny");
  TraceOptions options;
  options.batch = 3;
  options.seq = 13;
  const int m = 4;
  const Graph whole = trace_training_step(*config, options);
  for (bool gpipe : {true, false}) {
    const Graph r0 = trace_pipeline_rank(*config, options, two_rank(0, gpipe, m));
    const Graph r1 = trace_pipeline_rank(*config, options, two_rank(1, gpipe, m));
    // The two stages do the whole model's matrix products, once per micro-batch.
    for (Phase ph : {Phase::Forward, Phase::Backward})
      EXPECT_NEAR(r0.phase_total(ph).matmul_flops + r1.phase_total(ph).matmul_flops,
                  m * whole.phase_total(ph).matmul_flops,
                  1e-9 * m * whole.phase_total(ph).matmul_flops);
    // Every message: m activations one way, m gradients back, [3, 13, C] f32 each.
    int sends = 0;
    for (const Graph* g : {&r0, &r1})
      for (const CollectiveNode& c : g->collectives) {
        EXPECT_EQ(c.axis, "pp");
        EXPECT_DOUBLE_EQ(c.bytes, 3 * 13 * 4 * double(config->hidden_size()));
        ++sends;
      }
    EXPECT_EQ(sends, 2 * m);
    // Each rank holds its own stages' parameters; the last also the tied embedding it multiplies
    // with.
    EXPECT_GT(r1.parameter_count + r0.parameter_count, whole.parameter_count);
  }
  // Rank 0 keeps all m micro-batches' activations under GPipe, at most 2 under 1F1B.
  const double gpipe0 = trace_pipeline_rank(*config, options, two_rank(0, true, m)).step_peak_bytes;
  const double f1b0 = trace_pipeline_rank(*config, options, two_rank(0, false, m)).step_peak_bytes;
  const double gpipe2 = trace_pipeline_rank(*config, options, two_rank(0, true, 2)).step_peak_bytes;
  EXPECT_GT(gpipe0, f1b0);
  // 1F1B on rank 0 holds two micro-batches at most, as GPipe over two does.
  EXPECT_NEAR(f1b0, gpipe2, 0.02 * gpipe2);
}

// The last rank under 1F1B sends micro-batch 0's input gradient after its backward, then runs
// micro-batch 1's forward and backward. The executor retires a send after the first compute that
// follows it, so that gradient is gone before micro-batch 1's backward, the rank's peak; the same
// list with the send after micro-batch 1's forward keeps it through that backward, exactly one
// message (B x T x C f32) more. (Before the executor retired sends at fixed points the trace kept
// a gradient through the second compute, the later of the two outcomes a run could have.)
TEST(PipelineTrace, LastRankFreesASentGradientAfterTheNextCompute) {
  const models::ConfigPtr config = models::family_named("gpt2").preset("tiny");
  TraceOptions options;
  options.batch = 3;
  options.seq = 13;
  const PipelineRank f1b = two_rank(1, false, 2);  // RA0 F0 B0 SG0 RA1 F1 B1 SG1
  PipelineRank late = f1b;
  auto& a = late.actions;
  ASSERT_EQ(a[3].kind, K::SendGradient);
  ASSERT_EQ(a[5].kind, K::Forward);
  std::rotate(a.begin() + 3, a.begin() + 4, a.begin() + 6);  // RA0 F0 B0 RA1 F1 SG0 B1 SG1
  ASSERT_EQ(a[5].kind, K::SendGradient);
  const double message = double(options.batch * options.seq * config->hidden_size() * 4);
  EXPECT_DOUBLE_EQ(trace_pipeline_rank(*config, options, late).step_peak_bytes -
                       trace_pipeline_rank(*config, options, f1b).step_peak_bytes,
                   message);
}

TEST(PipelineTrace, MemoryModelCountsOnlyTheRanksParameters) {
  const models::ConfigPtr config = models::family_named("gpt2").preset("tiny");
  MemoryLayout layout;
  layout.micro_batch = 3;
  layout.seq = 13;
  const MemoryEstimate whole = estimate_memory(*config, layout);
  layout.pipeline = two_rank(0, false, 4);
  const MemoryEstimate r0 = estimate_memory(*config, layout);
  layout.pipeline = two_rank(1, false, 4);
  const MemoryEstimate r1 = estimate_memory(*config, layout);
  // Moments cover the rank's own parameters; together, the model's.
  EXPECT_DOUBLE_EQ(r0.optimizer_bytes + r1.optimizer_bytes, whole.optimizer_bytes);
  EXPECT_EQ(r0.parameter_count + r1.parameter_count, whole.parameter_count);
  // The last rank also holds the tied embedding's weights (not its moments).
  EXPECT_GT(r0.param_bytes + r1.param_bytes, whole.param_bytes);
}

}  // namespace
}  // namespace tessel::plan
