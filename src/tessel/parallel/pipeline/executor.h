// SPDX-License-Identifier: Apache-2.0
// The one pipeline executor: it runs this rank's list of any Schedule that validates (GPipe, 1F1B,
// interleaved 1F1B or a hand-made one) against an abstract StageRunner, so the schedule decides
// the order and the model decides the compute. Backward goes through autograd; the input of every
// non-first stage is a fresh leaf that requires grad, whose gradient is what goes back upstream.
//
// Communication is asynchronous point-to-point: a message is tagged with its identity
// (activation or gradient, producing stage, micro-batch), sends are non-blocking with their
// buffers kept until they are retired (waited for) after the first compute that follows them in
// the list (or at its end), and receives are posted at the start of the compute that precedes
// them, so a transfer overlaps that compute. Retiring at a fixed point rather than whenever a
// test finds a send complete makes a rank's bytes at every action independent of the other
// ranks' timing, which the planner's memory model (plan/pipeline_trace.cpp) counts exactly, in the
// spirit of DataParallelOptions::max_pending_reductions. Shapes are agreed up front (every
// message of stage s has activation_shape(s)), so no size ever travels.
//
// Each run records when every action started and ended and the most forwards whose backward had
// not run yet (activations in flight), which measured_simulation() turns into a Simulation that
// the printer draws and whose bubble fraction is the measured one.
#pragma once

#include <functional>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/parallel/pipeline/schedule.h"
#include "tessel/parallel/pipeline/simulator.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel::pipeline {

// The model side of a pipeline: what one stage computes for one micro-batch.
class StageRunner {
 public:
  virtual ~StageRunner() = default;
  // `input` is undefined on the first stage; on the others it is the received activation as a
  // leaf that requires grad. Returns the stage's output, which must have the agreed shape, or on
  // the last stage the scalar loss of the micro-batch (backward starts from it with gradient 1).
  virtual Tensor forward(int stage, int microbatch, const Tensor& input) = 0;
};

struct ExecutorOptions {
  // The shape of what stage s sends to stage s + 1 (its gradient has the same shape): one entry
  // per stage but the last, or a single entry for every stage.
  std::vector<Shape> activation_shapes;
  DType dtype = DType::F32;
  // A barrier before the first action, so the times of all ranks share one origin (the measured
  // bubble needs it; a training step can do without).
  bool barrier_at_start = false;
  // Called after each action of this rank's list with its index, once the sends that action
  // retires are freed: what a rank holds there is fixed by the list (tests and instrumentation).
  std::function<void(int index)> after_action;
};

struct ExecutionResult {
  // This rank's actions in list order; start/end in milliseconds since the run began.
  std::vector<TimedAction> timeline;
  double makespan_ms = 0;
  double compute_ms = 0;   // in Forward and Backward
  int peak_in_flight = 0;  // forwards whose backward had not run, at most, over all chunks
  // On the rank of the last stage: losses[i] of micro-batch i (empty elsewhere).
  std::vector<double> losses;
};

class PipelineExecutor {
 public:
  // Validates `schedule` (an Error lists every problem; nothing runs) and checks it against the
  // communicator (one rank per schedule rank) and the shapes.
  PipelineExecutor(Schedule schedule, dist::CommPtr comm, ExecutorOptions options);

  // Runs this rank's actions once: one optimizer step's forwards and backwards. Gradients
  // accumulate into the parameters' .grad() as any backward does.
  ExecutionResult run(StageRunner& runner);

  const Schedule& schedule() const { return schedule_; }
  const Shape& activation_shape(int stage) const;

 private:
  int tag_of(ActionKind kind, int stage, int microbatch) const;

  Schedule schedule_;
  dist::CommPtr comm_;
  ExecutorOptions options_;
};

// Collective over `comm`: every rank's timeline, indexed by rank (a rank's count is its list's
// length in `schedule`).
std::vector<std::vector<TimedAction>> gather_timelines(dist::Communicator& comm,
                                                       const Schedule& schedule,
                                                       const std::vector<TimedAction>& mine);

// A Simulation made of measured times (milliseconds): makespan, compute time per rank, bubble
// fraction and peak activations in flight as simulate() defines them, so text_timeline() and
// chrome_trace() draw what really happened.
Simulation measured_simulation(const Schedule& schedule,
                               const std::vector<std::vector<TimedAction>>& timelines);

}  // namespace tessel::parallel::pipeline
