// SPDX-License-Identifier: Apache-2.0
// A rank other than 0 of a tensor-parallel serving group: it holds its share of the model and a
// paged KV pool of its heads, and runs every step rank 0's Engine sends (serve/step_mirror.h)
// until rank 0 says stop. No scheduler, block manager or sampler: rank 0 decides everything.
#pragma once

#include <memory>

#include "tessel/models/causal_lm.h"
#include "tessel/serve/engine_options.h"
#include "tessel/serve/kv_pool_plan.h"
#include "tessel/serve/step_mirror.h"

namespace tessel::serve {

class EngineFollower {
 public:
  // Collective with rank 0's Engine constructor (the pool size is agreed). `options` must be
  // rank 0's.
  EngineFollower(std::shared_ptr<models::CausalLM> model, EngineOptions options,
                 std::shared_ptr<StepMirror> mirror);

  // Runs steps until rank 0 stops; returns the number of steps run. A step that fails here
  // cannot be matched by the other ranks, so it ends the job (dist::abort_job) naming the step.
  int64_t run();

  const KvPoolPlan& pool_plan() const { return plan_; }

 private:
  std::shared_ptr<models::CausalLM> model_;
  EngineOptions options_;
  std::shared_ptr<StepMirror> mirror_;
  KvPoolPlan plan_;
  std::unique_ptr<PagedKvPool> pool_;
};

}  // namespace tessel::serve
