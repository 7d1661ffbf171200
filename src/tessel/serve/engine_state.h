// SPDX-License-Identifier: Apache-2.0
// The serving engine's state (serve/engine.h), shared by its files: engine.cpp (submission, the
// loop, one step at a time) and engine_groups.cpp (one step per group of requests in flight).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tessel/serve/engine.h"
#include "tessel/serve/engine_outputs.h"
#include "tessel/serve/paged_kv_cache.h"
#include "tessel/serve/pipelined_forward.h"
#include "tessel/serve/pool_priority.h"

namespace tessel::serve {

struct Engine::State {
  explicit State(io::Tokenizer t) : tokenizer(std::move(t)) {}
  std::shared_ptr<models::CausalLM> model;
  io::Tokenizer tokenizer;
  EngineOptions options;
  int64_t context_length = 0, vocab_limit = 0;
  std::optional<int64_t> eos;
  std::unique_ptr<PagedKvPool> pool;
  std::unique_ptr<BlockManager> blocks;
  // One scheduler per group of requests (step_groups.h); one unless the model is pipelined.
  std::vector<std::unique_ptr<Scheduler>> schedulers;
  // With several groups over the one pool: who may be admitted while memory is short.
  std::unique_ptr<PoolPriority> priority;
  std::unique_ptr<OutputWriter> outputs;
  std::shared_ptr<StepMirror> mirror;  // rank 0 of a tensor-parallel group, else null

  mutable std::mutex mu;
  std::condition_variable wake;
  std::deque<std::shared_ptr<RequestState>> inbox;
  std::vector<std::string> cancels;
  int64_t waiting_requests = 0;  // inbox + admitted-but-waiting requests, for the queue limit
  bool draining = false, stopping = false, started = false;
  Clock::time_point drain_deadline;
  EngineStats snapshot;
  std::thread thread;
  // Liveness (EngineStats::engine_alive, busy_seconds), read without the lock: whether the loop
  // runs, and when its current iteration began (steady-clock ns; 0 while it waits for work).
  std::atomic<bool> alive{false};
  std::atomic<int64_t> busy_since{0};
  std::string failure;  // under mu: why the loop ended, when an exception ended it

  // The engine thread's own state.
  std::unordered_map<std::string, std::shared_ptr<RequestState>> live;
  std::unordered_map<const RequestState*, std::vector<std::shared_ptr<Sequence>>> sequences;
  int64_t next_seq = 0;
  uint64_t next_arrival = 0;
  int64_t steps = 0;
  // The host allocator's largest peak during a step above what it held when the step began
  // (EngineStats::step_peak_bytes).
  int64_t step_peak_bytes = 0;
  // Cross-step pipelining (options.step_groups > 1): the model's two-halved forward, the steps
  // begun and not finished (oldest first, at most one per group), and cancellations of requests
  // whose group has a step in flight (ended once it finishes: its plan points at them).
  PipelinedForward* pipelined = nullptr;
  struct InFlight {
    int group = 0;
    StepPlan plan;
    std::unique_ptr<PagedStep> step;
    int64_t ticket = 0;
  };
  std::deque<InFlight> in_flight;
  std::vector<char> group_busy;
  std::vector<std::string> deferred_cancels;
  int64_t most_in_flight = 0;  // logged when the loop ends: whether the groups overlapped

  Scheduler& scheduler_of(const Sequence& seq) { return *schedulers[size_t(seq.group)]; }

  void loop();
  void run_loop();
  void fail_everything(const std::string& error);
  void accept(const std::shared_ptr<RequestState>& request);
  void end_request(const RequestState& request, FinishReason reason, const std::string& error);
  void run_step(int group, StepPlan& plan);      // measures the step's memory
  void execute_step(int group, StepPlan& plan);  // packs, runs and samples it
  // After a step's forward: its tokens have KV, and each sampling chunk's row is sampled.
  void finish_step(int group, StepPlan& plan, const PagedStep& step, Tensor logits);
  // engine_groups.cpp: one round of the pipelined loop (start a step for every idle group with
  // work unless `stop_now`, then finish the oldest in flight); false when nothing ran.
  bool run_groups(bool stop_now);
  void begin_group_step(int group, StepPlan plan);
  void finish_oldest_step();
  void end_failed_step(const StepPlan& plan, const std::string& error);
  bool request_in_flight(const RequestState& request) const;
  void run_mirrored(const StepPlan& plan, PagedStep& step, Tensor& logits);
  void tell_followers_idle();
  void publish();
};

}  // namespace tessel::serve
