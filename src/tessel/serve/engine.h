// SPDX-License-Identifier: Apache-2.0
// The serving engine: one thread runs iteration-level ("continuous") batching (Orca, Yu et al.
// 2022): each step the scheduler picks decode tokens of running sequences and prompt chunks of
// waiting ones under a token budget, the model runner executes them as one ragged batch over the
// paged KV cache (PagedAttention, Kwon et al. 2023), and each sequence's sampler and text stream
// turn its logits into deltas for the front end. Front ends talk to it only through EngineQueue.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "tessel/io/tokenizer.h"
#include "tessel/models/causal_lm.h"
#include "tessel/serve/engine_options.h"
#include "tessel/serve/kv_pool_plan.h"
#include "tessel/serve/request.h"
#include "tessel/serve/step_mirror.h"

namespace tessel::serve {

class Engine final : public EngineQueue {
 public:
  static constexpr double kDefaultKvFraction = serve::kDefaultKvFraction;

  // `model` is in inference mode afterwards; its cache geometry comes from its config (this
  // rank's heads under tensor parallelism). With `mirror` (rank 0 of a tensor-parallel group;
  // the other ranks run EngineFollower) every step is sent to the group before it runs and the
  // logits are gathered from it; the constructor agrees on the pool size with the group.
  Engine(std::shared_ptr<models::CausalLM> model, io::Tokenizer tokenizer, EngineOptions options,
         std::shared_ptr<StepMirror> mirror = nullptr);
  ~Engine() override;  // stops the thread; running requests end with kCancelled

  // Starts the engine thread (submit() queues before it runs).
  void start();
  // Stops accepting (submit answers kDraining), lets running and waiting requests finish for up
  // to `timeout`, then cancels the rest; returns when the thread has stopped.
  void drain(std::chrono::milliseconds timeout);

  SubmitResult submit(Request request, DeltaSink sink) override;
  void cancel(const std::string& id) override;
  EngineStats stats() const override;
  const io::Tokenizer& tokenizer() const override;
  int64_t context_length() const override;
  std::optional<int64_t> eos_token_id() const override;

  const EngineOptions& options() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tessel::serve
