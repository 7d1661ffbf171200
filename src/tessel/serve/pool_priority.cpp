// SPDX-License-Identifier: Apache-2.0
// The anchor of groups that share one KV pool (pool_priority.h).
#include "tessel/serve/pool_priority.h"

#include "tessel/core/error.h"

namespace tessel::serve {

PoolPriority::PoolPriority(std::vector<Scheduler*> schedulers)
    : schedulers_(std::move(schedulers)) {
  for (Scheduler* s : schedulers_) {
    TESSEL_CHECK(s != nullptr, "PoolPriority: a null scheduler");
    s->set_admission_gate([this](const Sequence& seq) { return may_admit(seq); });
  }
}

const Sequence* PoolPriority::anchor() {
  if (anchor_ && anchor_->state == SeqState::kFinished) anchor_.reset();
  return anchor_.get();
}

void PoolPriority::after_plan(const StepPlan& plan) {
  if (plan.preempted == 0 || anchor() != nullptr) return;
  // Each scheduler's lists are oldest first: the anchor is the oldest of their fronts.
  const auto older = [](const Sequence& a, const Sequence& b) {
    if (a.request->arrival != b.request->arrival) return a.request->arrival < b.request->arrival;
    return a.choice < b.choice;
  };
  for (Scheduler* s : schedulers_)
    for (const auto* list : {&s->running(), &s->waiting()})
      if (!list->empty() && (!anchor_ || older(*list->front(), *anchor_))) anchor_ = list->front();
}

bool PoolPriority::may_admit(const Sequence& seq) {
  const Sequence* a = anchor();
  return a == nullptr || a == &seq;
}

}  // namespace tessel::serve
