// SPDX-License-Identifier: Apache-2.0
// The engine with one step of each group of requests in flight (serve/step_groups.h): cross-step
// pipelining as vLLM's virtual engines and TensorRT-LLM's pipeline-parallel executor do it. Each
// round starts a step for every group without one in flight, then finishes the oldest step (waits
// for its logits, samples); its group's next step starts in the next round, while the later stages
// still compute the other groups' steps. Every stage runs the steps in the order they began, so a
// step never reads KV blocks that a later step writes, and block frees and prefix-cache
// registrations (made when a step finishes) are seen by later steps only.
#include <algorithm>
#include <exception>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/core/log.h"
#include "tessel/core/profile.h"
#include "tessel/dist/world.h"
#include "tessel/kernels/batch_invariant.h"
#include "tessel/serve/engine_state.h"

namespace tessel::serve {

bool Engine::State::run_groups(bool stop_now) {
  bool ran = false;
  if (!stop_now) {
    for (size_t g = 0; g < schedulers.size(); ++g) {
      if (group_busy[g]) continue;
      StepPlan plan = [&] {
        profile::Scope phase("engine.schedule");
        return schedulers[g]->schedule();
      }();
      if (priority) priority->after_plan(plan);
      if (plan.empty()) continue;
      begin_group_step(int(g), std::move(plan));
      ran = true;
    }
  }
  if (!in_flight.empty()) {
    finish_oldest_step();
    ran = true;
  }
  return ran;
}

void Engine::State::begin_group_step(int group, StepPlan plan) {
  autograd::NoGradGuard no_grad;
  kernels::BatchInvariantScope invariant(options.deterministic);
  InFlight f;
  f.group = group;
  f.plan = std::move(plan);
  try {
    profile::Scope phase("engine.pack");
    f.step = std::make_unique<PagedStep>(*pool, *blocks, f.plan);
    for (const auto& [from, to] : f.plan.copies) pool->copy_block(from, to);
  } catch (const std::exception& e) {
    end_failed_step(f.plan, e.what());  // nothing was sent: this step's requests end
    ++steps;
    return;
  }
  try {
    if (mirror) {
      profile::Scope phase("engine.send_step");
      mirror->send_step(f.step->tensors(), f.plan.copies);
    }
    profile::Scope phase("engine.forward");
    f.ticket = pipelined->begin_forward(f.step->ids(), *f.step, f.step->sample_rows());
  } catch (const std::exception& e) {
    // The other stages are inside the step, and later steps of the other groups queue behind it
    // on every stage: the ranks can no longer run in step (as in run_mirrored).
    dist::abort_job(1, detail::concat("tessel: error: serve: pipelined step ", steps, " (group ",
                                      group, ") failed on rank 0: ", e.what(),
                                      " (the ranks can no longer run in step)"));
  }
  group_busy[size_t(group)] = 1;
  in_flight.push_back(std::move(f));
  most_in_flight = std::max(most_in_flight, int64_t(in_flight.size()));
}

void Engine::State::finish_oldest_step() {
  InFlight f = std::move(in_flight.front());
  in_flight.pop_front();
  group_busy[size_t(f.group)] = 0;
  // A pipelined model may compute part of the step here (the rest of a stage, the head), which
  // must run in the same mode as its beginning.
  kernels::BatchInvariantScope invariant(options.deterministic);
  Tensor logits;
  try {
    profile::Scope phase("engine.wait_logits");
    logits = pipelined->end_forward(f.ticket);
    if (mirror) logits = mirror->gather_logits(logits);
  } catch (const std::exception& e) {
    dist::abort_job(1, detail::concat("tessel: error: serve: pipelined step of group ", f.group,
                                      " failed on rank 0: ", e.what(),
                                      " (the ranks can no longer run in step)"));
  }
  try {
    finish_step(f.group, f.plan, *f.step, std::move(logits));
  } catch (const std::exception& e) {
    end_failed_step(f.plan, e.what());
  }
  ++steps;
}

void Engine::State::end_failed_step(const StepPlan& plan, const std::string& error) {
  log(LogLevel::Error, "engine: step ", steps, " failed: ", error);
  std::vector<std::shared_ptr<RequestState>> failed;
  for (const ScheduledChunk& c : plan.chunks) failed.push_back(c.seq->request);
  for (const auto& request : failed) end_request(*request, FinishReason::kError, error);
}

bool Engine::State::request_in_flight(const RequestState& request) const {
  auto it = sequences.find(&request);
  if (it == sequences.end() || it->second.empty()) return false;
  return group_busy[size_t(it->second.front()->group)] != 0;
}

}  // namespace tessel::serve
