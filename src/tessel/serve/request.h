// SPDX-License-Identifier: Apache-2.0
// The serving engine's contract with its front ends (the HTTP server, bench, tests): what a
// request asks for (token ids and per-request sampling parameters, OpenAI's and vLLM's meanings),
// what comes back while it runs (text deltas per choice, with token ids, logprobs and the finish
// reason), and the queue a front end submits to. The front end speaks HTTP and JSON; the engine
// speaks only these types, so either side can change without the other.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessel::io {
class Tokenizer;
}

namespace tessel::serve {

// How a choice ended. kCancelled: the client went away or the request was aborted (never sent to
// a client); kError: the engine could not run it (the message says why).
enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
// "stop", "length", "cancelled", "error" (OpenAI's finish_reason for the first two); "" for kNone.
std::string_view finish_reason_name(FinishReason reason);

// Per-request sampling, applied in this order to one row of logits: repetition penalty (CTRL,
// Keskar et al. 2019: positive logits of seen tokens divided by it, negative ones multiplied),
// presence and frequency penalties over the tokens generated so far (OpenAI's definition),
// temperature, top-k, top-p (nucleus), min-p (tokens below min_p x the top probability dropped).
struct SamplingParams {
  double temperature = 1.0;         // 0: greedy (argmax, the first maximum on ties)
  double top_p = 1.0;               // (0, 1]
  int64_t top_k = 0;                // 0: no limit
  double min_p = 0.0;               // [0, 1]
  double repetition_penalty = 1.0;  // > 0; 1: off; over prompt and generated tokens
  double presence_penalty = 0.0;    // [-2, 2]
  double frequency_penalty = 0.0;   // [-2, 2]
  // The request's generator seed; absent: the engine derives one from the request's arrival
  // number. Choice i of a request with n > 1 uses seed + i.
  std::optional<uint64_t> seed;
  int64_t max_tokens = 16;              // new tokens per choice, >= 1
  int64_t n = 1;                        // choices, >= 1
  std::vector<std::string> stop;        // stop strings: the text ends before the first one
  std::vector<int64_t> stop_token_ids;  // ends after emitting one (its text is not sent)
  bool ignore_eos = false;              // keep going past the model's end-of-sequence token
  // Top-N alternatives reported with each generated token's log-probability (0..20); absent: no
  // logprobs. Log-probabilities are of the model's distribution after temperature (vLLM's
  // convention: before top-k/top-p/min-p filtering).
  std::optional<int64_t> logprobs;

  // Throws Error naming the first parameter out of range.
  void validate() const;
  bool greedy() const { return temperature == 0.0 || top_k == 1; }
};

struct Request {
  std::string id;               // unique among live requests (the front end's completion id)
  std::vector<int64_t> prompt;  // token ids, non-empty
  SamplingParams params;
};

struct TokenLogprob {
  int64_t token = 0;
  double logprob = 0;
  std::vector<std::pair<int64_t, double>> top;  // most likely first
};

// What the engine reports for one choice as it runs. The concatenation of a choice's `text`
// values is its whole output (stop strings withheld and cut; never half a UTF-8 character).
struct Delta {
  int64_t index = 0;                          // the choice, in [0, n)
  std::string text;                           // new text since the previous delta of this choice
  std::vector<int64_t> tokens;                // tokens sampled since the previous delta
  std::vector<TokenLogprob> logprobs;         // one per token when logprobs were asked for
  FinishReason finish = FinishReason::kNone;  // set on the choice's last delta
  std::string error;                          // with kError
  int64_t prompt_tokens = 0;                  // usage so far (completion_tokens counts this choice)
  int64_t completion_tokens = 0;
};

// Called on the engine's thread for each delta; must not block (a slow client's bytes are queued
// by the front end, never by the engine).
using DeltaSink = std::function<void(const Delta&)>;

enum class SubmitStatus { kAccepted, kQueueFull, kDraining, kInvalid };

struct SubmitResult {
  SubmitStatus status = SubmitStatus::kAccepted;
  std::string message;  // why, when not accepted
};

// A snapshot of the engine for /metrics and logs.
struct EngineStats {
  // Sequences by state; swapped_out: waiting ones that were preempted (to be recomputed).
  int64_t waiting = 0, running = 0, swapped_out = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_block_size = 0;
  int64_t prefix_queries = 0, prefix_hits = 0;  // prompt blocks looked up / found cached
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;  // totals since start
  int64_t steps = 0;
  int64_t requests_finished = 0;
  // The host allocator's peak during a step above what it held when the step began (the loaded
  // model, the KV pool): the largest step's since start, in bytes. `tessel plan --serve` predicts
  // it (serve/step_memory.h).
  int64_t step_peak_bytes = 0;
  // Liveness, for /health: whether the engine's thread is running its loop, and for how long it
  // has been inside its current iteration (a step; 0 while it waits for work). A step that never
  // ends (a hung kernel, a deadlock) shows as a growing busy_seconds, a thread that died or
  // stopped as engine_alive false.
  bool engine_alive = true;
  double busy_seconds = 0;
  std::string engine_error;  // why the thread stopped, when it failed
};

// The queue a front end submits to: thread-safe, non-blocking.
class EngineQueue {
 public:
  virtual ~EngineQueue() = default;
  // Queues `request`; `sink` receives its deltas until each choice has finished. Not accepted:
  // kQueueFull (the waiting queue is at its limit), kDraining (shutting down), kInvalid (prompt
  // longer than the context, parameters out of range: the message says which).
  virtual SubmitResult submit(Request request, DeltaSink sink) = 0;
  // Stops a request (a client disconnected): its choices end with kCancelled and its KV blocks
  // are free within one step. Unknown or finished ids are ignored.
  virtual void cancel(const std::string& id) = 0;
  virtual EngineStats stats() const = 0;
  // The model's facts a front end needs.
  virtual const io::Tokenizer& tokenizer() const = 0;
  virtual int64_t context_length() const = 0;  // prompt + max_tokens may not exceed it
  virtual std::optional<int64_t> eos_token_id() const = 0;
};

}  // namespace tessel::serve
