// SPDX-License-Identifier: Apache-2.0
// One choice of one request as the engine tracks it: its tokens (prompt, then generated), how many
// of them have keys and values in the paged cache, its sampler and text stream, and where it is in
// its life (waiting for admission, running, finished). A request with n choices is n sequences
// that share the prompt's KV blocks after the prompt's prefill (copy-on-write, block_manager.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/serve/detokenizer.h"
#include "tessel/serve/request.h"
#include "tessel/serve/sampler.h"

namespace tessel::serve {

using Clock = std::chrono::steady_clock;

// What every choice of a request shares.
struct RequestState {
  Request request;
  DeltaSink sink;
  uint64_t arrival = 0;  // submission order (the scheduler's priority: lower first)
  uint64_t seed = 0;     // params.seed, or one derived from the arrival
  int64_t finished_choices = 0;
  bool cancelled = false;
};

enum class SeqState { kWaiting, kRunning, kFinished };

struct Sequence {
  int64_t id = 0;  // the block manager's sequence id
  std::shared_ptr<RequestState> request;
  int64_t choice = 0;
  SeqState state = SeqState::kWaiting;
  // Prompt then generated tokens. After a preemption the whole list is the next prefill (the
  // generated tokens' KV is recomputed, their samples are kept).
  std::vector<int64_t> tokens;
  int64_t prompt_length = 0;
  int64_t computed = 0;  // leading tokens whose KV is in the cache
  // Choice 0 of an n > 1 request prefills the prompt; the others are forked from it when its
  // prefill ends (they wait in `children` until then).
  std::vector<std::shared_ptr<Sequence>> children;
  std::unique_ptr<RequestSampler> sampler;
  std::unique_ptr<TextStream> text;
  int64_t generated() const { return int64_t(tokens.size()) - prompt_length; }
  // Tokens that still need their KV before the next sample.
  int64_t pending() const { return int64_t(tokens.size()) - computed; }
  bool decoding() const { return pending() == 1 && generated() > 0; }
  int64_t preemptions = 0;
  int group = 0;  // the engine's group of requests (step_groups.h), every choice's the same
};

}  // namespace tessel::serve
