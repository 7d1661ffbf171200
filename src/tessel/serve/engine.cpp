// SPDX-License-Identifier: Apache-2.0
// The engine thread: takes submissions and cancellations, plans a step, runs it as one ragged
// batch, samples, and hands each choice's new text to its request's sink.
#include "tessel/serve/engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/core/log.h"
#include "tessel/core/profile.h"
#include "tessel/dist/world.h"
#include "tessel/kernels/batch_invariant.h"
#include "tessel/serve/engine_state.h"
#include "tessel/serve/step_groups.h"
#include "tessel/tensor/allocator.h"

namespace tessel::serve {
namespace {

// SplitMix64: a seed per arrival for requests that bring none.
uint64_t derived_seed(uint64_t arrival) {
  uint64_t z = arrival + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Nanoseconds on the steady clock, never 0 (0 marks "waiting for work" in busy_since).
int64_t busy_stamp() {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch());
  return std::max<int64_t>(1, int64_t(ns.count()));
}

}  // namespace

Engine::Engine(std::shared_ptr<models::CausalLM> model, io::Tokenizer tokenizer,
               EngineOptions options, std::shared_ptr<StepMirror> mirror)
    : state_(std::make_unique<State>(std::move(tokenizer))) {
  TESSEL_CHECK(model != nullptr, "Engine: no model");
  State& s = *state_;
  s.model = std::move(model);
  s.options = options;
  TESSEL_CHECK(options.max_batch_tokens >= 1 && options.max_seqs >= 1 && options.block_size >= 1 &&
                   options.max_queue >= 1 && options.max_n >= 1 && options.kv_cache_bytes >= 0 &&
                   options.max_model_len >= 0,
               "Engine: max_batch_tokens ", options.max_batch_tokens, ", max_seqs ",
               options.max_seqs, ", block_size ", options.block_size, ", max_queue ",
               options.max_queue, ", max_n ", options.max_n, " must be >= 1, kv_cache_bytes ",
               options.kv_cache_bytes, " and max_model_len ", options.max_model_len, " >= 0");
  s.model->eval();
  const models::ModelConfig& config = s.model->model_config();
  s.vocab_limit = std::min(config.vocabulary_size(), s.tokenizer.vocab_size());
  if (auto id = s.tokenizer.eos_token_id())
    s.eos = *id;
  else if (auto cid = config.eos_id())
    s.eos = *cid;

  s.mirror = std::move(mirror);
  TESSEL_CHECK(s.mirror == nullptr || s.mirror->leader(),
               "Engine: runs on rank 0 of its tensor-parallel group (the others run "
               "EngineFollower)");
  std::function<int64_t(int64_t)> agree;
  if (s.mirror) agree = [m = s.mirror](int64_t n) { return m->agree_min(n); };
  const KvPoolPlan pool = plan_kv_pool(*s.model, options, agree);
  s.context_length = pool.context_length;
  const int64_t num_blocks = pool.num_blocks;
  const DType dtype = pool.dtype;
  s.pool = std::make_unique<PagedKvPool>(pool.geometry, num_blocks, options.block_size, dtype);
  s.blocks = std::make_unique<BlockManager>(num_blocks, options.block_size, options.prefix_caching);
  const int64_t groups = options.step_groups;
  TESSEL_CHECK(groups >= 1 && groups <= options.max_seqs, "Engine: ", groups,
               " step groups, expected 1 to max_seqs ", options.max_seqs);
  if (groups > 1) {
    s.pipelined = dynamic_cast<PipelinedForward*>(s.model.get());
    TESSEL_CHECK(s.pipelined != nullptr, "Engine: ", groups, " step groups need a model whose ",
                 "forward can be started and finished apart (rank 0 of a pipeline); ",
                 s.model->type_name(), " cannot");
  }
  for (int64_t g = 0; g < groups; ++g)
    s.schedulers.push_back(std::make_unique<Scheduler>(
        *s.blocks, options.max_batch_tokens, group_max_seqs(options.max_seqs, groups, g)));
  if (groups > 1) {  // one admission order over the shared pool (pool_priority.h)
    std::vector<Scheduler*> each;
    for (const auto& sch : s.schedulers) each.push_back(sch.get());
    s.priority = std::make_unique<PoolPriority>(std::move(each));
  }
  s.group_busy.assign(size_t(groups), 0);
  s.outputs = std::make_unique<OutputWriter>(s.eos);
  log(LogLevel::Info, "engine: KV cache of ", num_blocks, " blocks x ", options.block_size,
      " tokens (", s.pool->nbytes() >> 20, " MiB, ", dtype_name(dtype), "), context ",
      s.context_length, ", up to ", options.max_seqs, " sequences and ", options.max_batch_tokens,
      " tokens per step",
      s.mirror ? detail::concat(", model parallel over ", s.mirror->size(),
                                " ranks (each over its share of the model)")
               : std::string());
  s.publish();
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
    state_->draining = true;
    state_->drain_deadline = Clock::now();
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

void Engine::start() {
  std::lock_guard<std::mutex> lock(state_->mu);
  TESSEL_CHECK(!state_->started, "Engine.start: already started");
  state_->started = true;
  state_->alive = true;  // before submit() can see `started`, so a caller never reads a gap
  state_->thread = std::thread([s = state_.get()] { s->run_loop(); });
}

void Engine::drain(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->draining = true;
    state_->stopping = true;
    state_->drain_deadline = Clock::now() + timeout;
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

SubmitResult Engine::submit(Request request, DeltaSink sink) {
  State& s = *state_;
  if (request.prompt.empty()) return {SubmitStatus::kInvalid, "the prompt has no tokens"};
  try {
    request.params.validate();
    TextStream check(s.tokenizer, request.params.stop);  // stop strings must be valid UTF-8
  } catch (const Error& e) {
    return {SubmitStatus::kInvalid, e.what()};
  }
  if (request.params.n > s.options.max_n)
    return {SubmitStatus::kInvalid,
            detail::concat("n ", request.params.n, " is over the limit ", s.options.max_n)};
  const int64_t prompt = int64_t(request.prompt.size());
  if (prompt + request.params.max_tokens > s.context_length)
    return {
        SubmitStatus::kInvalid,
        detail::concat("the prompt's ", prompt, " tokens plus max_tokens ",
                       request.params.max_tokens, " exceed the context length ", s.context_length)};
  const int64_t vocab = s.model->model_config().vocabulary_size();
  for (int64_t id : request.prompt)
    if (id < 0 || id >= vocab)
      return {SubmitStatus::kInvalid,
              detail::concat("prompt token ", id, " is outside the vocabulary [0, ", vocab, ")")};
  auto state = std::make_shared<RequestState>();
  state->request = std::move(request);
  state->sink = std::move(sink);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.failure.empty())
      return {SubmitStatus::kDraining, "the engine stopped after an error: " + s.failure};
    if (s.draining) return {SubmitStatus::kDraining, "the server is shutting down"};
    if (s.waiting_requests >= s.options.max_queue)
      return {SubmitStatus::kQueueFull,
              detail::concat(s.waiting_requests, " requests are waiting (the limit is ",
                             s.options.max_queue, ")")};
    ++s.waiting_requests;
    s.inbox.push_back(std::move(state));
  }
  s.wake.notify_all();
  return {};
}

void Engine::cancel(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancels.push_back(id);
  }
  state_->wake.notify_all();
}

EngineStats Engine::stats() const {
  const State& s = *state_;
  const int64_t since = s.busy_since.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(s.mu);
  EngineStats st = s.snapshot;
  st.engine_alive = s.alive.load(std::memory_order_acquire);
  st.engine_error = s.failure;
  if (since != 0) st.busy_seconds = std::max(0.0, 1e-9 * double(busy_stamp() - since));
  return st;
}

const io::Tokenizer& Engine::tokenizer() const {
  return state_->tokenizer;
}
int64_t Engine::context_length() const {
  return state_->context_length;
}
std::optional<int64_t> Engine::eos_token_id() const {
  return state_->eos;
}
const EngineOptions& Engine::options() const {
  return state_->options;
}

void Engine::State::accept(const std::shared_ptr<RequestState>& request) {
  request->arrival = next_arrival++;
  const SamplingParams& params = request->request.params;
  request->seed = params.seed ? *params.seed : derived_seed(request->arrival);
  std::vector<std::shared_ptr<Sequence>>& list = sequences[request.get()];
  for (int64_t c = 0; c < params.n; ++c) {
    auto seq = std::make_shared<Sequence>();
    seq->id = next_seq++;
    seq->request = request;
    seq->choice = c;
    seq->tokens = request->request.prompt;
    seq->prompt_length = int64_t(seq->tokens.size());
    seq->sampler = std::make_unique<RequestSampler>(params, request->seed + uint64_t(c),
                                                    request->request.prompt, vocab_limit);
    seq->text = std::make_unique<TextStream>(tokenizer, params.stop);
    list.push_back(seq);
  }
  for (size_t c = 1; c < list.size(); ++c) list[0]->children.push_back(list[c]);
  // The request's choices all join one group: the others fork from choice 0's blocks.
  std::vector<int64_t> loads;
  for (const auto& sch : schedulers)
    loads.push_back(int64_t(sch->running().size() + sch->waiting().size()));
  const int group = least_loaded_group(loads);
  for (const auto& seq : list) seq->group = group;
  scheduler_of(*list[0]).add_waiting(list[0]);
  live[request->request.id] = request;
}

// Ends every unfinished choice of `request` with `reason` and forgets it.
void Engine::State::end_request(const RequestState& request, FinishReason reason,
                                const std::string& error) {
  auto it = sequences.find(&request);
  if (it == sequences.end()) return;
  for (const auto& seq : it->second) {
    if (seq->state == SeqState::kFinished) continue;
    scheduler_of(*seq).remove(*seq);
    outputs->finish(*seq, reason, error);
  }
  live.erase(request.request.id);
  sequences.erase(it);
}

void Engine::State::run_step(int group, StepPlan& plan) {
  // The step's own memory: packing, the forward's activations and workspace, the logits.
  Allocator& host = cpu_allocator();
  const int64_t held = int64_t(host.bytes_in_use());
  host.reset_peak();
  execute_step(group, plan);
  step_peak_bytes = std::max(step_peak_bytes, int64_t(host.peak_bytes()) - held);
}

void Engine::State::execute_step(int group, StepPlan& plan) {
  autograd::NoGradGuard no_grad;
  // Every product and attention row computed in a fixed order whatever the batch holds.
  kernels::BatchInvariantScope invariant(options.deterministic);
  std::optional<profile::Scope> phase(std::in_place, "engine.pack");
  PagedStep step(*pool, *blocks, plan);  // checks the plan before anything is written or sent
  for (const auto& [from, to] : plan.copies) pool->copy_block(from, to);
  Tensor logits;
  if (mirror) {
    phase.reset();
    run_mirrored(plan, step, logits);
  } else {
    phase.emplace("engine.forward");
    logits = model->forward_cached(step.ids(), step, step.sample_rows());
  }
  phase.reset();
  finish_step(group, plan, step, std::move(logits));
}

void Engine::State::finish_step(int group, StepPlan& plan, const PagedStep& step, Tensor logits) {
  schedulers[size_t(group)]->complete(plan);
  logits = logits.to(DType::F32);
  profile::Scope phase("engine.sample");  // tensors are contiguous (tensor.h)
  const int64_t vocab = logits.size(-1);
  const float* data = logits.data<float>();
  for (size_t r = 0; r < step.sampled_chunks().size(); ++r) {
    Sequence& seq = *plan.chunks[step.sampled_chunks()[r]].seq;
    const std::span<const float> row(data + int64_t(r) * vocab, size_t(vocab));
    // The prompt is done: the other choices share its blocks from here and sample the same row.
    std::vector<std::shared_ptr<Sequence>> forked = std::move(seq.children);
    seq.children.clear();
    for (const auto& child : forked) {
      blocks->fork(seq.id, child->id);
      child->computed = seq.computed;
      scheduler_of(*child).add_running(child);
    }
    std::vector<Sequence*> samplers{&seq};
    for (const auto& child : forked) samplers.push_back(child.get());
    for (Sequence* s : samplers) {
      const FinishReason done = outputs->sample(*s, row, context_length);
      if (done == FinishReason::kNone) continue;
      scheduler_of(*s).remove(*s);
      RequestState& request = *s->request;
      if (++request.finished_choices == request.request.params.n) {
        live.erase(request.request.id);
        sequences.erase(&request);
      }
    }
  }
}

// Once sent, the other ranks are inside the step: a failure here ends the job (naming the step).
void Engine::State::run_mirrored(const StepPlan& plan, PagedStep& step, Tensor& logits) {
  {
    profile::Scope phase("engine.send_step");
    mirror->send_step(step.tensors(), plan.copies);
  }
  try {
    {
      profile::Scope phase("engine.forward");
      logits = model->forward_cached(step.ids(), step, step.sample_rows());
    }
    profile::Scope phase("engine.gather_logits");
    logits = mirror->gather_logits(logits);
  } catch (const std::exception& e) {
    dist::abort_job(1, detail::concat("tessel: error: serve: tensor-parallel step ", steps,
                                      " failed on rank 0: ", e.what(),
                                      " (the ranks can no longer run in step)"));
  }
}

void Engine::State::publish() {
  EngineStats st;
  for (const auto& scheduler : schedulers) {
    st.waiting += int64_t(scheduler->waiting().size());
    for (const auto& seq : scheduler->waiting())
      if (seq->preemptions > 0) ++st.swapped_out;  // preempted, waiting to be recomputed
    st.running += int64_t(scheduler->running().size());
    st.preemptions += scheduler->preemptions();
  }
  const BlockManagerStats b = blocks->stats();
  st.kv_blocks_total = b.total;
  st.kv_blocks_used = b.used;
  st.kv_block_size = blocks->block_size();
  st.prefix_queries = b.prefix_queries;
  st.prefix_hits = b.prefix_hits;
  st.prompt_tokens = outputs->prompt_tokens();
  st.generated_tokens = outputs->generated_tokens();
  st.requests_finished = outputs->requests_finished();
  st.steps = steps;
  st.step_peak_bytes = step_peak_bytes;
  std::lock_guard<std::mutex> lock(mu);
  st.waiting += int64_t(inbox.size());
  snapshot = st;
}

// The thread's body: the loop; an exception that escapes it (a bug) ends every request with an
// error and leaves a dead engine that /health reports, instead of std::terminate.
void Engine::State::run_loop() {
  try {
    loop();
  } catch (const std::exception& e) {
    log(LogLevel::Error, "engine: the engine thread stopped: ", e.what());
    fail_everything(e.what());
  }
  if (mirror) {
    try {
      mirror->send_stop();  // the other ranks leave their loops and exit 0
    } catch (const std::exception& e) {
      log(LogLevel::Error, "engine: could not stop the tensor-parallel ranks: ", e.what());
    }
  }
  if (pipelined)
    log(LogLevel::Info, "engine: ", steps, " steps of ", schedulers.size(),
        " groups of requests, up to ", most_in_flight, " in flight at once");
  busy_since.store(0, std::memory_order_release);
  alive.store(false, std::memory_order_release);
}

// Before the engine sleeps: the other ranks poll, not wait in a collective (spin, then deadline).
void Engine::State::tell_followers_idle() {
  if (!mirror) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!inbox.empty() || !cancels.empty() || stopping) return;
  }
  mirror->send_idle();
}

void Engine::State::fail_everything(const std::string& error) {
  std::deque<std::shared_ptr<RequestState>> arrived;
  {
    std::lock_guard<std::mutex> lock(mu);
    failure = error;
    arrived.swap(inbox);
  }
  Delta d;
  d.finish = FinishReason::kError;
  d.error = "the engine stopped: " + error;
  for (const auto& request : arrived)
    if (request->sink) request->sink(d);
  std::vector<std::shared_ptr<RequestState>> rest;
  for (const auto& [id, request] : live) rest.push_back(request);
  for (const auto& request : rest) {
    try {
      end_request(*request, FinishReason::kError, d.error);
    } catch (const std::exception&) {
      if (request->sink) request->sink(d);  // the engine's own state may be what broke
    }
  }
}

void Engine::State::loop() {
  while (true) {
    if (live.empty()) tell_followers_idle();
    std::deque<std::shared_ptr<RequestState>> arrived;
    std::vector<std::string> cancelled;
    bool stop_now = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (inbox.empty() && cancels.empty() && !stopping && live.empty()) {
        busy_since.store(0, std::memory_order_release);
        wake.wait(lock,
                  [&] { return !inbox.empty() || !cancels.empty() || stopping || !live.empty(); });
      }
      busy_since.store(busy_stamp(), std::memory_order_release);
      arrived.swap(inbox);
      cancelled.swap(cancels);
      cancelled.insert(cancelled.end(), deferred_cancels.begin(), deferred_cancels.end());
      deferred_cancels.clear();
      if (stopping && (live.empty() || Clock::now() >= drain_deadline)) stop_now = true;
    }
    for (const auto& request : arrived) {
      try {
        accept(request);
      } catch (const std::exception& e) {
        // submit() checked what it could; anything left ends this request only.
        log(LogLevel::Error, "engine: request ", request->request.id, " refused: ", e.what());
        Delta d;
        d.finish = FinishReason::kError;
        d.error = e.what();
        live.erase(request->request.id);
        sequences.erase(request.get());
        if (request->sink) request->sink(d);
      }
    }
    for (const std::string& id : cancelled) {
      auto it = live.find(id);
      if (it == live.end()) continue;
      if (request_in_flight(*it->second))
        deferred_cancels.push_back(id);
      else
        end_request(*it->second, FinishReason::kCancelled, "");
    }
    if (stop_now && arrived.empty() && in_flight.empty()) {
      std::vector<std::shared_ptr<RequestState>> rest;
      for (const auto& [id, request] : live) rest.push_back(request);
      for (const auto& request : rest) end_request(*request, FinishReason::kCancelled, "");
      publish();
      return;
    }
    bool ran = false;
    if (pipelined) {
      ran = run_groups(stop_now);
    } else {
      StepPlan plan = [&] {
        profile::Scope phase("engine.schedule");
        return schedulers[0]->schedule();
      }();
      ran = !plan.empty();
      if (ran) {
        try {
          run_step(0, plan);
        } catch (const std::exception& e) {
          end_failed_step(plan, e.what());  // a step that fails ends its requests, not the server
        }
        ++steps;
      }
    }
    if (!ran && !live.empty()) {
      // Nothing can run until a submission, a cancellation or the drain deadline.
      tell_followers_idle();
      std::unique_lock<std::mutex> lock(mu);
      busy_since.store(0, std::memory_order_release);
      wake.wait_for(lock, std::chrono::milliseconds(5));
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      profile::Scope phase("engine.publish");
      waiting_requests = int64_t(inbox.size());
      for (const auto& scheduler : schedulers)
        for (const auto& seq : scheduler->waiting())
          if (seq->choice == 0 && seq->generated() == 0) ++waiting_requests;
    }
    publish();
  }
}

}  // namespace tessel::serve
