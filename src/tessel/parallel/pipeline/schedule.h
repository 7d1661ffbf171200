// SPDX-License-Identifier: Apache-2.0
// A pipeline schedule as data: one ordered list of actions per rank (forward or backward of one
// micro-batch through one stage, and the point-to-point messages between stages). Generators
// (generators.h) build the lists for GPipe, 1F1B and interleaved 1F1B; the simulator
// (simulator.h) proves a set of lists free of deadlock and dependency errors; the printer
// (printer.h) draws the timeline; one executor runs any list that validates.
//
// Semantics every consumer of a Schedule relies on:
// - The model is cut into ranks * virtual_stages stages (chunks); stage s lives on rank s % ranks
//   (Megatron-LM's interleaved assignment; with one virtual stage, stage s is rank s).
// - A rank executes its list strictly in order.
// - A send does not wait for its receiver when issued. A receive blocks until the matching send
//   has been issued (and its transfer time has passed). The executor retires a send (waits for
//   it, frees its buffer) after the first compute that follows it in the list, or at the list's
//   end, which needs the receiver to have posted the receive; receives are posted at the start
//   of the compute before them (or before the first action). The simulator checks that this
//   cannot deadlock.
// - A message is identified by (activation or gradient, producing stage, micro-batch); an
//   executor tags it with that identity, or matches by order on each pair of ranks when the
//   simulator reports the schedule in order (Simulation::in_order; true for every generator).
#pragma once

#include <string>
#include <vector>

namespace tessel::parallel::pipeline {

enum class ActionKind {
  Forward,         // forward of `microbatch` through `stage`
  Backward,        // backward of `microbatch` through `stage`
  SendActivation,  // output of Forward(stage, microbatch) to the rank of stage + 1
  RecvActivation,  // output of Forward(stage, microbatch) from `peer`, the rank of `stage`
  SendGradient,    // input gradient from Backward(stage, microbatch) to the rank of stage - 1
  RecvGradient,    // input gradient from Backward(stage, microbatch) from `peer`
};

// For messages, `stage` is always the stage whose compute produced the tensor, on both sides.
struct Action {
  ActionKind kind = ActionKind::Forward;
  int microbatch = 0;
  int stage = 0;
  int peer = -1;  // the other rank of a send/recv; -1 for compute

  bool operator==(const Action&) const = default;
};

bool is_compute(ActionKind kind);
bool is_send(ActionKind kind);
bool is_recv(ActionKind kind);

// "F mb3 s1", "B mb0 s5", "SendA mb3 s1 ->2", "RecvG mb2 s4 <-0".
std::string to_string(const Action& action);
std::string to_string(ActionKind kind);

struct Schedule {
  std::string name;  // "gpipe", "1f1b", "interleaved"
  int ranks = 1;
  int virtual_stages = 1;  // stages (model chunks) per rank
  int microbatches = 1;
  std::vector<std::vector<Action>> actions;  // actions[rank], in execution order

  int num_stages() const { return ranks * virtual_stages; }
  int owner(int stage) const { return stage % ranks; }
  // Which of a rank's chunks a stage is: 0 for stage r, 1 for stage r + ranks, ...
  int chunk(int stage) const { return stage / ranks; }
};

}  // namespace tessel::parallel::pipeline
