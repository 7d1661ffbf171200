// SPDX-License-Identifier: Apache-2.0
// The validator and simulator of pipeline schedules. It checks a set of per-rank lists against
// the semantics of schedule.h and runs them in simulated time, so a schedule is known to be
// correct before any executor touches a tensor:
// - dependency errors, found in each rank's order: a compute on a stage the rank does not own, a
//   forward whose input was neither received nor computed earlier on the rank, a backward before
//   its forward or before the gradient of the next stage, a send of a tensor not produced yet, a
//   send or receive naming the wrong peer or a stage with no such neighbour;
// - every (stage, micro-batch) forward and backward computed exactly once;
// - every send matched by exactly one receive and vice versa;
// - deadlock: the ranks run until none can move; a rank still short of its end is stuck on a
//   receive, or retiring a send whose receive is not posted yet (schedule.h), and the report
//   names it, what it waits for, where the other rank is stuck, and any cycle of ranks waiting on
//   each other.
// The timeline it produces gives the makespan, the bubble fraction and the peak number of
// activations each rank holds.
#pragma once

#include <string>
#include <vector>

#include "tessel/parallel/pipeline/schedule.h"

namespace tessel::parallel::pipeline {

// Durations in arbitrary time units. forward/backward are per stage (model chunk) and
// micro-batch: with v chunks per rank, a chunk is 1/v of the rank's layers. A send occupies its
// rank for `comm` and its message arrives when the send ends; a receive takes no time of its own
// beyond waiting for that arrival.
struct Costs {
  double forward = 1.0;
  double backward = 2.0;
  double comm = 0.0;
  // Optional per-stage durations (one entry per stage), overriding forward/backward: uneven stages
  // (a GPT-2's LM head, a partition of unequal blocks) are what makes a measured bubble exceed the
  // equal-stage formula, and only per-stage costs predict it.
  std::vector<double> stage_forward = {}, stage_backward = {};

  double forward_of(int stage) const {
    return stage_forward.empty() ? forward : stage_forward[size_t(stage)];
  }
  double backward_of(int stage) const {
    return stage_backward.empty() ? backward : stage_backward[size_t(stage)];
  }
};

struct TimedAction {
  int index = 0;  // position in the rank's list
  double start = 0.0;
  double end = 0.0;
};

struct Simulation {
  std::vector<std::string> errors;  // empty when the schedule is valid
  // timeline[rank]: the actions the rank executed, in order (all of them unless deadlocked).
  std::vector<std::vector<TimedAction>> timeline;
  double makespan = 0.0;             // end of the last action of any rank
  std::vector<double> compute_time;  // per rank: time spent in forward and backward
  // Idle share of the ranks' time: 1 - sum_r compute_time[r] / (ranks * makespan), i.e. the
  // per-rank idle fraction averaged over ranks.
  double bubble_fraction = 0.0;
  // Per rank: the most stage activations held at once (forwards done whose backward has not run),
  // counted over all the rank's chunks; one unit is one micro-batch through one stage.
  std::vector<int> peak_in_flight;
  // Whether, on every ordered pair of ranks, the receives come in the order the sends are issued:
  // then an executor may match messages by order alone (as NCCL point-to-point does) instead of
  // by tag. Not an error when false.
  bool in_order = true;

  bool ok() const { return errors.empty(); }
  std::string error_text() const;  // the errors, one per line
};

Simulation simulate(const Schedule& schedule, const Costs& costs = {});

// Throws tessel::Error listing every error of simulate() when the schedule is invalid.
void validate(const Schedule& schedule, const Costs& costs = {});

}  // namespace tessel::parallel::pipeline
