// SPDX-License-Identifier: Apache-2.0
// The pipeline executor: one rank's action list run in order, with tagged non-blocking messages,
// receives posted one compute ahead, backward through autograd, and measured times.
#include "tessel/parallel/pipeline/executor.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "tessel/autograd/engine.h"
#include "tessel/core/error.h"

namespace tessel::parallel::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// What one rank keeps of one (stage, micro-batch) between its actions.
struct Slot {
  Tensor input;        // received activation (a leaf that requires grad); undefined on stage 0
  Tensor output;       // forward's result (the loss on the last stage), until its backward
  Tensor grad_output;  // received gradient of `output`
};

struct Posted {
  Tensor buffer;
  dist::WorkPtr work;
};

}  // namespace

PipelineExecutor::PipelineExecutor(Schedule schedule, dist::CommPtr comm, ExecutorOptions options)
    : schedule_(std::move(schedule)), comm_(std::move(comm)), options_(std::move(options)) {
  validate(schedule_);  // a schedule that could deadlock or skip a message never starts
  const int stages = schedule_.num_stages();
  TESSEL_CHECK(comm_ != nullptr || schedule_.ranks == 1, "PipelineExecutor: a schedule over ",
               schedule_.ranks, " ranks needs a communicator");
  TESSEL_CHECK(!comm_ || comm_->size() == schedule_.ranks, "PipelineExecutor: schedule '",
               schedule_.name, "' has ", schedule_.ranks, " ranks but the communicator has ",
               comm_ ? comm_->size() : 1);
  TESSEL_CHECK(stages == 1 || options_.activation_shapes.size() == 1 ||
                   int(options_.activation_shapes.size()) == stages - 1,
               "PipelineExecutor: ", options_.activation_shapes.size(),
               " activation shapes given, expected 1 or one per stage but the last (", stages - 1,
               ")");
  const int64_t tags = int64_t(stages) * schedule_.microbatches * 2;
  TESSEL_CHECK(tags <= dist::Communicator::kMaxTag + 1, "PipelineExecutor: ", stages, " stages x ",
               schedule_.microbatches, " micro-batches need ", tags,
               " message tags, more than the ", dist::Communicator::kMaxTag + 1, " available");
}

const Shape& PipelineExecutor::activation_shape(int stage) const {
  const auto& shapes = options_.activation_shapes;
  return shapes.size() == 1 ? shapes.front() : shapes.at(size_t(stage));
}

int PipelineExecutor::tag_of(ActionKind kind, int stage, int microbatch) const {
  const bool gradient = kind == ActionKind::SendGradient || kind == ActionKind::RecvGradient;
  return (stage * schedule_.microbatches + microbatch) * 2 + (gradient ? 1 : 0);
}

ExecutionResult PipelineExecutor::run(StageRunner& runner) {
  const int rank = comm_ ? comm_->rank() : 0;
  const int last_stage = schedule_.num_stages() - 1;
  const int m = schedule_.microbatches;
  const std::vector<Action>& list = schedule_.actions[size_t(rank)];
  std::vector<Slot> slots(size_t(schedule_.num_stages() * m));
  auto slot = [&](int stage, int mb) -> Slot& { return slots[size_t(stage * m + mb)]; };
  // The tensor a message carries: stage s's output shape for both directions of edge s -> s + 1.
  auto message_shape = [&](const Action& a) -> const Shape& {
    const bool act = a.kind == ActionKind::SendActivation || a.kind == ActionKind::RecvActivation;
    return activation_shape(act ? a.stage : a.stage - 1);
  };

  std::vector<std::optional<Posted>> posted(list.size());
  size_t posted_upto = 0;  // receives at indices below it are posted
  // Posts every receive up to and including the compute after `from`, so that the transfer of
  // what that compute needs overlaps the compute running now.
  auto post_ahead = [&](size_t from) {
    size_t end = from;
    while (end < list.size() && !is_compute(list[end].kind)) ++end;
    end = std::min(end + 1, list.size());
    for (; posted_upto < end; ++posted_upto) {
      const Action& a = list[posted_upto];
      if (!is_recv(a.kind)) continue;
      Tensor buffer = empty(message_shape(a), options_.dtype);
      dist::WorkPtr work = comm_->recv_async(buffer, a.peer, tag_of(a.kind, a.stage, a.microbatch));
      posted[posted_upto] = Posted{std::move(buffer), std::move(work)};
    }
  };
  // Sends in flight with their payloads. Each is retired (waited for, its payload freed) after
  // the first compute that follows it in the list, or at the end of the list: a fixed point, so
  // the bytes a rank holds at every action are the same whichever rank is slow. (Freeing a
  // payload when a test() happened to find its send complete made the last stage's peak move by
  // one input gradient from run to run.) The receiver has posted the matching receive by then in
  // every schedule that validates: the simulator checks it (simulator.h).
  std::vector<std::pair<Tensor, dist::WorkPtr>> sends;
  auto retire_sends = [&] {
    for (auto& s : sends) s.second->wait();
    sends.clear();
  };
  auto progress = [&] {
    for (size_t i = 0; i < posted_upto; ++i)
      if (posted[i]) posted[i]->work->test();
  };

  ExecutionResult result;
  if (schedule_.num_stages() > 0 && schedule_.owner(last_stage) == rank)
    result.losses.assign(size_t(m), 0.0);
  if (options_.barrier_at_start && comm_) comm_->barrier();
  const Clock::time_point t0 = Clock::now();
  int in_flight = 0;
  post_ahead(0);
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    TimedAction timed{int(i), ms_since(t0), 0};
    switch (a.kind) {
      case ActionKind::Forward: {
        post_ahead(i + 1);
        Slot& s = slot(a.stage, a.microbatch);
        Tensor out = runner.forward(a.stage, a.microbatch, s.input);
        if (a.stage == last_stage) {
          TESSEL_CHECK(out.defined() && out.numel() == 1, "PipelineExecutor: the last stage ",
                       a.stage, " returned ", out.defined() ? out.shape().str() : "nothing",
                       " for micro-batch ", a.microbatch, ", expected the scalar loss");
          result.losses[size_t(a.microbatch)] = out.item();
        } else {
          TESSEL_CHECK(out.defined() && out.shape() == activation_shape(a.stage),
                       "PipelineExecutor: stage ", a.stage, " returned ",
                       out.defined() ? out.shape().str() : "nothing", " for micro-batch ",
                       a.microbatch, ", expected the agreed ", activation_shape(a.stage).str());
        }
        s.output = std::move(out);
        result.peak_in_flight = std::max(result.peak_in_flight, ++in_flight);
        break;
      }
      case ActionKind::Backward: {
        post_ahead(i + 1);
        Slot& s = slot(a.stage, a.microbatch);
        if (a.stage == last_stage) {
          autograd::backward(s.output);
        } else {
          autograd::backward({s.output}, {s.grad_output});
        }
        s.output = Tensor();
        s.grad_output = Tensor();
        if (a.stage == 0) s.input = Tensor();
        --in_flight;
        break;
      }
      case ActionKind::SendActivation:
      case ActionKind::SendGradient: {
        Slot& s = slot(a.stage, a.microbatch);
        Tensor payload;
        if (a.kind == ActionKind::SendActivation) {
          payload = s.output.detach();
        } else {
          // An input that did not influence the output has no gradient: it sends zeros.
          payload = s.input.grad().defined() ? s.input.grad().detach()
                                             : zeros(message_shape(a), options_.dtype);
          s.input = Tensor();
        }
        dist::WorkPtr work =
            comm_->send_async(payload, a.peer, tag_of(a.kind, a.stage, a.microbatch));
        sends.emplace_back(std::move(payload), std::move(work));
        break;
      }
      case ActionKind::RecvActivation:
      case ActionKind::RecvGradient: {
        post_ahead(i);
        Posted p = std::move(*posted[i]);
        posted[i].reset();
        p.work->wait();
        if (a.kind == ActionKind::RecvActivation) {
          slot(a.stage + 1, a.microbatch).input = p.buffer.set_requires_grad(true);
        } else {
          slot(a.stage - 1, a.microbatch).grad_output = p.buffer;
        }
        break;
      }
    }
    timed.end = ms_since(t0);
    if (is_compute(a.kind)) {
      result.compute_ms += timed.end - timed.start;
      progress();  // lets transports that progress only when polled move the next messages
      retire_sends();
    }
    result.timeline.push_back(timed);
    if (options_.after_action) options_.after_action(int(i));
  }
  retire_sends();
  result.makespan_ms = ms_since(t0);
  return result;
}

std::vector<std::vector<TimedAction>> gather_timelines(dist::Communicator& comm,
                                                       const Schedule& schedule,
                                                       const std::vector<TimedAction>& mine) {
  TESSEL_CHECK(comm.size() == schedule.ranks, "gather_timelines: communicator of ", comm.size(),
               " ranks for a schedule of ", schedule.ranks);
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const auto& list : schedule.actions) {
    counts.push_back(2 * int64_t(list.size()));
    total += counts.back();
  }
  TESSEL_CHECK(2 * int64_t(mine.size()) == counts[size_t(comm.rank())],
               "gather_timelines: ", mine.size(), " timed actions on rank ", comm.rank(),
               ", its list has ", counts[size_t(comm.rank())] / 2);
  std::vector<double> flat;
  for (const TimedAction& t : mine) {
    flat.push_back(t.start);
    flat.push_back(t.end);
  }
  Tensor in = from_data(flat, {int64_t(flat.size())});
  Tensor out = empty({total}, DType::F64);
  comm.all_gather_v(in, out, counts);
  const double* p = out.data<double>();
  std::vector<std::vector<TimedAction>> timelines(size_t(schedule.ranks));
  for (size_t r = 0; r < timelines.size(); ++r) {
    for (int64_t i = 0; i < counts[r] / 2; ++i, p += 2) {
      timelines[r].push_back(TimedAction{int(i), p[0], p[1]});
    }
  }
  return timelines;
}

Simulation measured_simulation(const Schedule& schedule,
                               const std::vector<std::vector<TimedAction>>& timelines) {
  TESSEL_CHECK(int(timelines.size()) == schedule.ranks, "measured_simulation: ", timelines.size(),
               " timelines for ", schedule.ranks, " ranks");
  Simulation sim;
  sim.timeline = timelines;
  sim.compute_time.assign(timelines.size(), 0.0);
  sim.peak_in_flight.assign(timelines.size(), 0);
  double compute = 0;
  for (size_t r = 0; r < timelines.size(); ++r) {
    int in_flight = 0;
    for (const TimedAction& t : timelines[r]) {
      const Action& a = schedule.actions[r].at(size_t(t.index));
      sim.makespan = std::max(sim.makespan, t.end);
      if (!is_compute(a.kind)) continue;
      sim.compute_time[r] += t.end - t.start;
      in_flight += a.kind == ActionKind::Forward ? 1 : -1;
      sim.peak_in_flight[r] = std::max(sim.peak_in_flight[r], in_flight);
    }
    compute += sim.compute_time[r];
  }
  sim.bubble_fraction =
      sim.makespan > 0 ? 1.0 - compute / (double(schedule.ranks) * sim.makespan) : 0.0;
  return sim;
}

}  // namespace tessel::parallel::pipeline
