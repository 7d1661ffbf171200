// SPDX-License-Identifier: Apache-2.0
// The loop of a tensor-parallel rank other than 0: receive a step, copy blocks, run the forward.
#include "tessel/serve/engine_follower.h"

#include <exception>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/dist/world.h"
#include "tessel/kernels/batch_invariant.h"

namespace tessel::serve {

EngineFollower::EngineFollower(std::shared_ptr<models::CausalLM> model, EngineOptions options,
                               std::shared_ptr<StepMirror> mirror)
    : model_(std::move(model)), options_(options), mirror_(std::move(mirror)) {
  TESSEL_CHECK(model_ != nullptr && mirror_ != nullptr, "EngineFollower: no model or no group");
  TESSEL_CHECK(!mirror_->leader(), "EngineFollower on rank 0 (rank 0 runs the Engine)");
  model_->eval();
  plan_ = plan_kv_pool(*model_, options_, [&](int64_t n) { return mirror_->agree_min(n); });
  pool_ = std::make_unique<PagedKvPool>(plan_.geometry, plan_.num_blocks, options_.block_size,
                                        plan_.dtype);
}

int64_t EngineFollower::run() {
  StepMirror::Received message;
  int64_t steps = 0;
  while (mirror_->receive(message)) {
    try {
      autograd::NoGradGuard no_grad;
      kernels::BatchInvariantScope invariant(options_.deterministic);
      for (const auto& [from, to] : message.copies) pool_->copy_block(from, to);
      PagedStep step(*pool_, std::move(message.step));
      Tensor logits = model_->forward_cached(step.ids(), step, step.sample_rows());
      mirror_->gather_logits(logits);
    } catch (const std::exception& e) {
      dist::abort_job(1, detail::concat("tessel: error: serve: tensor-parallel rank ",
                                        mirror_->group().rank(), " failed in step ", steps, ": ",
                                        e.what(), " (the ranks can no longer run in step)"));
    }
    ++steps;
  }
  return steps;
}

}  // namespace tessel::serve
