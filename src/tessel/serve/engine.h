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
#include "tessel/serve/request.h"

namespace tessel::serve {

struct EngineOptions {
  int64_t max_batch_tokens = 512;  // tokens per step (decode tokens + prompt chunks)
  int64_t max_seqs = 64;           // sequences running at once
  // KV pool size in bytes; 0: kDefaultKvFraction of the memory available when the engine starts,
  // capped by what max_seqs full-length sequences could use.
  int64_t kv_cache_bytes = 0;
  int64_t block_size = 16;  // tokens per KV block
  // The longest prompt + output (0: the model's max_positions).
  int64_t max_model_len = 0;
  bool prefix_caching = true;
  int64_t max_queue = 256;  // waiting requests before submit answers kQueueFull
  int64_t max_n = 16;       // choices per request
  // Batch-invariant kernels (docs/SERVING.md): a request's tokens and logprobs do not depend on
  // the rest of the batch. Off by default: measured 0.84x throughput at 16 and 64 concurrent
  // GPT-2 124M streams; products of up to 48 rows take the same kernel in both modes.
  bool deterministic = false;
};

class Engine final : public EngineQueue {
 public:
  static constexpr double kDefaultKvFraction = 0.4;

  // `model` is in inference mode afterwards; its cache geometry comes from its config (this
  // rank's heads under tensor parallelism).
  Engine(std::shared_ptr<models::CausalLM> model, io::Tokenizer tokenizer, EngineOptions options);
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
