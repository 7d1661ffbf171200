// SPDX-License-Identifier: Apache-2.0
// Pipeline schedules as data: the generators validate for every size, the simulator reproduces
// the bubble formulas of GPipe/1F1B ((p-1)/(m+p-1)) and interleaved 1F1B (Megatron-LM's
// (p-1)/(v*m) relative to the ideal time), 1F1B bounds the activations in flight, and crafted
// bad schedules are rejected with messages that name the rank and action.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "tessel/core/error.h"
#include "tessel/parallel/pipeline/generators.h"
#include "tessel/parallel/pipeline/printer.h"
#include "tessel/parallel/pipeline/simulator.h"

namespace tessel::parallel::pipeline {
namespace {

bool has_error(const Simulation& sim, const std::string& a, const std::string& b = "") {
  return std::any_of(sim.errors.begin(), sim.errors.end(), [&](const std::string& e) {
    return e.find(a) != std::string::npos && e.find(b) != std::string::npos;
  });
}

int count_compute(const Schedule& s, int rank) {
  const auto& list = s.actions[static_cast<size_t>(rank)];
  return static_cast<int>(
      std::count_if(list.begin(), list.end(), [](const Action& a) { return is_compute(a.kind); }));
}

// The position of an action in a rank's list (the tests edit generated schedules).
size_t find_action(const Schedule& s, int rank, const Action& action) {
  const auto& list = s.actions[static_cast<size_t>(rank)];
  auto it = std::find(list.begin(), list.end(), action);
  EXPECT_NE(it, list.end()) << to_string(action);
  return static_cast<size_t>(it - list.begin());
}

std::vector<Schedule> all_schedules() {
  std::vector<Schedule> schedules;
  for (int p : {2, 3, 4}) {
    for (int m : {1, 3, 8}) {
      schedules.push_back(gpipe(p, m));
      schedules.push_back(one_f_one_b(p, m));
    }
    for (int m : {p, 2 * p, 8}) {
      if (m % p == 0) {
        schedules.push_back(interleaved(p, m, 2));
      }
    }
  }
  return schedules;
}

TEST(PipelineSchedule, EveryGeneratorValidates) {
  for (const Schedule& s : all_schedules()) {
    SCOPED_TRACE(s.name + " p=" + std::to_string(s.ranks) + " m=" + std::to_string(s.microbatches));
    const Simulation sim = simulate(s);
    EXPECT_TRUE(sim.ok()) << sim.error_text();
    EXPECT_TRUE(sim.in_order);
    EXPECT_NO_THROW(validate(s, Costs{1.0, 2.0, 0.25}));
    for (int r = 0; r < s.ranks; ++r) {
      EXPECT_EQ(count_compute(s, r), 2 * s.microbatches * s.virtual_stages);
      EXPECT_EQ(sim.timeline[static_cast<size_t>(r)].size(),
                s.actions[static_cast<size_t>(r)].size());
    }
  }
}

TEST(PipelineSchedule, SingleRankHasNoMessagesAndNoBubble) {
  const Schedule s = one_f_one_b(1, 7);
  const Simulation sim = simulate(s);
  ASSERT_TRUE(sim.ok()) << sim.error_text();
  EXPECT_EQ(s.actions[0].size(), 14u);
  EXPECT_DOUBLE_EQ(sim.makespan, 21.0);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction, 0.0);
  EXPECT_EQ(sim.peak_in_flight[0], 1);
}

// f=1, b=2, c=0: both fill and drain cost (p-1)(f+b), so makespan = 3(m+p-1) and the bubble
// fraction is (p-1)/(m+p-1) for GPipe and 1F1B alike.
TEST(PipelineSchedule, GPipeAnd1F1BBubbleIsExact) {
  for (int p : {2, 3, 4}) {
    for (int m : {1, 3, 8, 13}) {
      for (const Schedule& s : {gpipe(p, m), one_f_one_b(p, m)}) {
        SCOPED_TRACE(s.name + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        const Simulation sim = simulate(s, Costs{1.0, 2.0, 0.0});
        ASSERT_TRUE(sim.ok()) << sim.error_text();
        EXPECT_DOUBLE_EQ(sim.makespan, 3.0 * (m + p - 1));
        EXPECT_NEAR(sim.bubble_fraction, double(p - 1) / (m + p - 1), 1e-12);
      }
    }
  }
}

// A slow last stage (f=3, b=6 against f=1, b=2) never idles once its first input arrives, so
// makespan = f0 + m(f1 + b1) + b0 = 1 + 36 + 2 for m = 4, whatever the schedule; the equal-stage
// formula would claim a bubble of (p-1)/(m+p-1) = 0.2 instead of 1 - 48/78.
TEST(PipelineSchedule, PerStageCostsPredictTheBottleneck) {
  Costs uneven;
  uneven.stage_forward = {1.0, 3.0};
  uneven.stage_backward = {2.0, 6.0};
  for (const Schedule& s : {gpipe(2, 4), one_f_one_b(2, 4)}) {
    SCOPED_TRACE(s.name);
    const Simulation sim = simulate(s, uneven);
    ASSERT_TRUE(sim.ok()) << sim.error_text();
    EXPECT_DOUBLE_EQ(sim.makespan, 39.0);
    EXPECT_NEAR(sim.bubble_fraction, 1.0 - 48.0 / 78.0, 1e-12);
    Costs same;  // per-stage costs all equal to the scalar ones change nothing
    same.stage_forward = {1.0, 1.0};
    same.stage_backward = {2.0, 2.0};
    EXPECT_DOUBLE_EQ(simulate(s, same).makespan, simulate(s, Costs{1.0, 2.0, 0.0}).makespan);
  }
  Costs wrong;
  wrong.stage_forward = {1.0, 1.0, 1.0};
  EXPECT_THROW(simulate(gpipe(2, 4), wrong), Error);
}

// Costs are per chunk. Interleaved with chunk costs f=1, b=2 takes 3(mv + p - 1): the ideal
// 3mv plus a bubble of 3(p-1), so bubble/ideal = (p-1)/(vm) (Megatron-LM's figure) and our
// fraction of the makespan is (p-1)/(vm + p - 1). The same model under plain 1F1B (one chunk of
// cost v*f per rank) has a bubble v times longer.
TEST(PipelineSchedule, InterleavedDividesTheBubbleByV) {
  for (int p : {2, 3, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p, 4 * p}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) +
                     " m=" + std::to_string(m));
        const Simulation sim = simulate(interleaved(p, m, v), Costs{1.0, 2.0, 0.0});
        ASSERT_TRUE(sim.ok()) << sim.error_text();
        const double ideal = 3.0 * m * v;
        EXPECT_DOUBLE_EQ(sim.makespan, 3.0 * (m * v + p - 1));
        EXPECT_NEAR((sim.makespan - ideal) / ideal, double(p - 1) / (v * m), 1e-12);
        EXPECT_NEAR(sim.bubble_fraction, double(p - 1) / (v * m + p - 1), 1e-12);
        const Simulation plain = simulate(one_f_one_b(p, m), Costs{1.0 * v, 2.0 * v, 0.0});
        EXPECT_NEAR(plain.makespan - ideal, v * (sim.makespan - ideal), 1e-9);
        EXPECT_LT(sim.bubble_fraction, plain.bubble_fraction);
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedNeedsMicrobatchesMultipleOfRanks) {
  EXPECT_THROW(interleaved(2, 3, 2), Error);
  try {
    interleaved(4, 6, 2);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of ranks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_schedule("zigzag", 2, 2), Error);
}

// 1F1B holds min(m, p - r) micro-batches on rank r; GPipe holds all m everywhere; interleaved
// holds its warm-up plus one: 2(p-1-r) + (v-1)p + 1 chunk activations (at most mv).
TEST(PipelineSchedule, PeakActivationsInFlight) {
  for (int p : {2, 3, 4}) {
    for (int m : {1, 3, 8}) {
      const Simulation f1b = simulate(one_f_one_b(p, m));
      const Simulation gp = simulate(gpipe(p, m));
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(f1b.peak_in_flight[static_cast<size_t>(r)], std::min(m, p - r));
        EXPECT_LE(f1b.peak_in_flight[static_cast<size_t>(r)], p);
        EXPECT_EQ(gp.peak_in_flight[static_cast<size_t>(r)], m);
      }
    }
    const int m = 2 * p;
    const int v = 2;
    const Simulation il = simulate(interleaved(p, m, v));
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(il.peak_in_flight[static_cast<size_t>(r)],
                std::min(m * v, 2 * (p - 1 - r) + (v - 1) * p + 1));
    }
  }
}

TEST(PipelineSchedule, CommunicationCostDelaysTheReceiver) {
  // rank 0: F [0,1], send [1,1.5]; rank 1: F [1.5,2.5], B [2.5,4.5], send [4.5,5];
  // rank 0: B [5,7].
  const Simulation sim = simulate(one_f_one_b(2, 1), Costs{1.0, 2.0, 0.5});
  ASSERT_TRUE(sim.ok()) << sim.error_text();
  EXPECT_DOUBLE_EQ(sim.makespan, 7.0);
  EXPECT_DOUBLE_EQ(sim.compute_time[0], 3.0);
  EXPECT_DOUBLE_EQ(sim.bubble_fraction, 1.0 - 6.0 / 14.0);
}

TEST(PipelineSchedule, RejectsAMissingSend) {
  Schedule s = one_f_one_b(2, 3);
  auto& rank0 = s.actions[0];
  rank0.erase(rank0.begin() +
              static_cast<long>(find_action(s, 0, {ActionKind::SendActivation, 1, 0, 1})));
  const Simulation sim = simulate(s);
  EXPECT_FALSE(sim.ok());
  EXPECT_TRUE(has_error(sim, "rank 1 action #", "(RecvA mb1 s0 <-0): no matching send on rank 0"))
      << sim.error_text();
  EXPECT_TRUE(has_error(sim, "(RecvA mb1 s0 <-0): deadlock")) << sim.error_text();
  EXPECT_THROW(validate(s), Error);
}

TEST(PipelineSchedule, RejectsACycle) {
  // Each rank receives before it sends what the other one waits for.
  Schedule s;
  s.name = "crafted";
  s.ranks = 2;
  s.microbatches = 1;
  s.actions = {
      {{ActionKind::Forward, 0, 0},
       {ActionKind::RecvGradient, 0, 1, 1},
       {ActionKind::SendActivation, 0, 0, 1},
       {ActionKind::Backward, 0, 0}},
      {{ActionKind::RecvActivation, 0, 0, 0},
       {ActionKind::Forward, 0, 1},
       {ActionKind::Backward, 0, 1},
       {ActionKind::SendGradient, 0, 1, 0}},
  };
  const Simulation sim = simulate(s);
  ASSERT_FALSE(sim.ok());
  for (const std::string& e : sim.errors) {
    EXPECT_NE(e.find("deadlock"), std::string::npos) << e;  // nothing else is wrong
  }
  EXPECT_TRUE(has_error(sim,
                        "rank 0 action #1 (RecvG mb0 s1 <-1): deadlock: waits for rank 1 "
                        "action #3 (SendG mb0 s1 ->0)"))
      << sim.error_text();
  EXPECT_TRUE(has_error(sim, "deadlock cycle: rank 0 waits on rank 1 waits on rank 0"))
      << sim.error_text();
  // Sending first breaks the cycle.
  std::swap(s.actions[0][1], s.actions[0][2]);
  EXPECT_TRUE(simulate(s).ok()) << simulate(s).error_text();
}

// The executor retires a send after the first compute that follows it, which waits for the
// receive to be posted (at the start of the compute before it). Rank 1 here runs micro-batch 1
// first: it posts its receive of micro-batch 0's activation only when it starts micro-batch 1's
// backward, which needs the activation rank 0 sends after retiring micro-batch 0's send. With
// sends that never wait this was a valid schedule; with retirement it deadlocks, and the
// simulator says so before any executor runs it.
TEST(PipelineSchedule, RejectsASendThatCannotBeRetired) {
  using K = ActionKind;
  Schedule s;
  s.name = "crafted";
  s.ranks = 2;
  s.microbatches = 2;
  s.actions = {
      {{K::Forward, 0, 0},
       {K::SendActivation, 0, 0, 1},
       {K::Forward, 1, 0},
       {K::SendActivation, 1, 0, 1},
       {K::RecvGradient, 1, 1, 1},
       {K::Backward, 1, 0},
       {K::RecvGradient, 0, 1, 1},
       {K::Backward, 0, 0}},
      {{K::RecvActivation, 1, 0, 0},
       {K::Forward, 1, 1},
       {K::Backward, 1, 1},
       {K::SendGradient, 1, 1, 0},
       {K::RecvActivation, 0, 0, 0},
       {K::Forward, 0, 1},
       {K::Backward, 0, 1},
       {K::SendGradient, 0, 1, 0}},
  };
  const Simulation sim = simulate(s);
  ASSERT_FALSE(sim.ok());
  for (const std::string& e : sim.errors) {
    EXPECT_NE(e.find("deadlock"), std::string::npos) << e;  // nothing else is wrong
  }
  EXPECT_TRUE(has_error(sim,
                        "rank 0 action #1 (SendA mb0 s0 ->1): deadlock: retiring this send after "
                        "the next compute waits for rank 1 action #4 (RecvA mb0 s0 <-0) to be "
                        "posted"))
      << sim.error_text();
  EXPECT_TRUE(has_error(sim, "deadlock cycle: rank 0 waits on rank 1 waits on rank 0"))
      << sim.error_text();
  EXPECT_THROW(validate(s), Error);
  // Micro-batch 1's activation sent first: rank 1 starts and posts in time.
  std::swap(s.actions[0][0], s.actions[0][2]);
  std::swap(s.actions[0][1], s.actions[0][3]);
  EXPECT_TRUE(simulate(s).ok()) << simulate(s).error_text();
}

TEST(PipelineSchedule, RejectsABackwardBeforeItsForward) {
  Schedule s = one_f_one_b(2, 3);
  const size_t f = find_action(s, 1, {ActionKind::Forward, 0, 1});
  const size_t b = find_action(s, 1, {ActionKind::Backward, 0, 1});
  std::swap(s.actions[1][f], s.actions[1][b]);
  const Simulation sim = simulate(s);
  EXPECT_TRUE(has_error(sim, "rank 1 action #" + std::to_string(f) + " (B mb0 s1)",
                        "backward before its forward"))
      << sim.error_text();
}

TEST(PipelineSchedule, RejectsADuplicateForward) {
  Schedule s = gpipe(3, 3);
  auto& rank1 = s.actions[1];
  const size_t f = find_action(s, 1, {ActionKind::Forward, 2, 1});
  rank1.insert(rank1.begin() + static_cast<long>(f) + 1, {ActionKind::Forward, 2, 1});
  const Simulation sim = simulate(s);
  EXPECT_TRUE(has_error(sim, "duplicate forward of mb2 s1: at rank 1 action #" + std::to_string(f) +
                                 ", rank 1 action #" + std::to_string(f + 1)))
      << sim.error_text();
}

TEST(PipelineSchedule, RejectsOtherDependencyErrors) {
  {  // a send issued before its forward
    Schedule s = one_f_one_b(2, 3);
    const size_t f = find_action(s, 0, {ActionKind::Forward, 2, 0});
    std::swap(s.actions[0][f], s.actions[0][f + 1]);
    EXPECT_TRUE(has_error(simulate(s), "(SendA mb2 s0 ->1)", "not produced yet"));
  }
  {  // a send to the wrong rank
    Schedule s = one_f_one_b(3, 3);
    s.actions[0][find_action(s, 0, {ActionKind::SendActivation, 1, 0, 1})].peer = 2;
    const Simulation sim = simulate(s);
    EXPECT_TRUE(has_error(sim, "rank 0 action #", "consuming stage 1 is on rank 1, not rank 2"))
        << sim.error_text();
  }
  {  // a forward on a rank that does not own the stage, and the missing one
    Schedule s = gpipe(2, 1);
    s.actions[0].push_back({ActionKind::Forward, 0, 1});
    const Simulation sim = simulate(s);
    EXPECT_TRUE(has_error(sim, "(F mb0 s1): computed stage 1 is on rank 1, not rank 0"))
        << sim.error_text();
  }
  {  // a forward whose input was never received, and a missing backward
    Schedule s = one_f_one_b(2, 3);
    auto& rank1 = s.actions[1];
    rank1.erase(rank1.begin() +
                static_cast<long>(find_action(s, 1, {ActionKind::RecvActivation, 2, 0, 0})));
    rank1.erase(rank1.begin() + static_cast<long>(find_action(s, 1, {ActionKind::Backward, 1, 1})));
    const Simulation sim = simulate(s);
    EXPECT_TRUE(has_error(sim, "(F mb2 s1): forward without its input")) << sim.error_text();
    EXPECT_TRUE(has_error(sim, "missing backward of mb1 s1")) << sim.error_text();
    EXPECT_TRUE(has_error(sim, "(SendA mb2 s0 ->1): no matching receive on rank 1"))
        << sim.error_text();
  }
}

TEST(PipelineSchedule, TextTimelineOf1F1B) {
  const Schedule s = one_f_one_b(2, 4);
  const Simulation sim = simulate(s, Costs{1.0, 2.0, 0.0});
  ASSERT_TRUE(sim.ok()) << sim.error_text();
  const std::string expected =
      "rank 0: F0 F1 .. .. B0 B0 F2 B1 B1 F3 B2 B2 .. B3 B3\n"
      "rank 1: .. F0 B0 B0 F1 B1 B1 F2 B2 B2 F3 B3 B3 .. ..\n";
  EXPECT_EQ(text_timeline(s, sim), expected);
  // A coarser unit shows what runs at the middle of each cell; a chunk letter marks the
  // interleaved stages.
  EXPECT_EQ(text_timeline(s, sim, 3.0),
            "rank 0: F1 B0 B1 B2 B3\n"
            "rank 1: F0 F1 F2 F3 ..\n");
  const Schedule il = interleaved(2, 2, 2);
  const std::string text = text_timeline(il, simulate(il));
  EXPECT_EQ(text.substr(0, 24), "rank 0: F0a F1a F0b F1b ") << text;
}

TEST(PipelineSchedule, ChromeTraceIsJsonWithOneEventPerCompute) {
  for (const Schedule& s : {one_f_one_b(3, 7), interleaved(3, 6, 2)}) {
    const Simulation sim = simulate(s, Costs{1.0, 2.0, 0.5});
    const nlohmann::json trace = nlohmann::json::parse(chrome_trace(s, sim, 1000.0));
    int compute = 0;
    int sends = 0;
    bool found = false;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.at("ph") != "X") {
        continue;
      }
      const std::string cat = e.at("cat");
      compute += cat == "forward" || cat == "backward";
      sends += cat == "send";
      EXPECT_LT(e.at("pid").get<int>(), s.ranks);
      if (e.at("name") == "F mb0 s0") {
        found = true;
        EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 1000.0);
      }
    }
    EXPECT_TRUE(found);
    EXPECT_EQ(compute, 2 * s.ranks * s.microbatches * s.virtual_stages);
    EXPECT_EQ(sends, 2 * s.microbatches * (s.num_stages() - 1));
    EXPECT_DOUBLE_EQ(trace.at("otherData").at("makespan").get<double>(), sim.makespan);
  }
}

}  // namespace
}  // namespace tessel::parallel::pipeline
