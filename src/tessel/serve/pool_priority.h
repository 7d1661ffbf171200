// SPDX-License-Identifier: Apache-2.0
// Progress for groups of requests that share one KV pool (`serve --pp` with --pp-groups G > 1,
// serve/step_groups.h). Each group has its own scheduler, and a scheduler can preempt only its own
// group's sequences (the other groups' blocks belong to steps in flight). With one scheduler the
// oldest sequence always proceeds: preemption takes the newest first, so the oldest holds its
// blocks until it finishes. Across groups that fails: a newer sequence of group B can take the
// free blocks that the oldest sequence, in group A, needs next, and A can then only preempt its
// own sequences, the oldest included; re-admitted, the oldest takes blocks B's sequence needs, and
// the two can go on preempting themselves in turn without either finishing (a livelock; tested in
// tests/serve/pool_priority_test.cpp).
//
// The rule: once any group had to preempt, the oldest unfinished sequence of all groups becomes
// the anchor, and until it finishes no group admits another sequence (the anchor itself is
// admitted as usual). The sequences holding blocks then only leave: each finishes or is
// preempted by its own group, and none returns while the anchor lives, so in a bounded number of
// steps the anchor holds the pool alone and finishes (a request is accepted only if it fits the
// pool). Then the next preemption picks the next anchor; every episode ends a sequence, so every
// request finishes. The price is admissions held back while memory is short, which one scheduler
// does too ("New sequences are not admitted in a step that had to preempt").
#pragma once

#include <memory>
#include <vector>

#include "tessel/serve/scheduler.h"

namespace tessel::serve {

class PoolPriority {
 public:
  // The groups' schedulers (over one block manager); installs the admission gate on each.
  explicit PoolPriority(std::vector<Scheduler*> schedulers);

  // After a group's step was planned: a preemption makes the oldest unfinished sequence the
  // anchor, unless one is live.
  void after_plan(const StepPlan& plan);
  // The live anchor, or null.
  const Sequence* anchor();

 private:
  bool may_admit(const Sequence& seq);

  std::vector<Scheduler*> schedulers_;
  std::shared_ptr<Sequence> anchor_;
};

}  // namespace tessel::serve
