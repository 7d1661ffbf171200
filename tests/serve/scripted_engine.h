// SPDX-License-Identifier: Apache-2.0
// A deterministic EngineQueue for the HTTP front end's own tests, so they can check every byte the
// server sends without a model: one thread steps all live requests, each step adding one token to
// every unfinished choice. Choice i's k-th token is the prompt's token (k + i) mod the prompt's
// length, with log-probability -(k + 1) / 8 and alternatives (token, that), (token + 1, that - 1).
// It honours max_tokens (length), stop_token_ids and end-of-sequence (stop), stop strings (the
// text held until the choice ends, cut before the first one), cancel, a queue limit and draining.
// The real Engine (serve/engine.h) is tested end to end separately.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tessel/io/tokenizer.h"
#include "tessel/serve/request.h"

namespace tessel::serve::test {

class ScriptedEngine final : public EngineQueue {
 public:
  struct Options {
    int64_t max_queue = 64;
    int64_t context_length = 256;
    std::optional<int64_t> eos;
    std::chrono::milliseconds step{1};
  };

  ScriptedEngine(io::Tokenizer tokenizer, Options options)
      : tokenizer_(std::move(tokenizer)), options_(options), thread_([this] { loop(); }) {}

  ~ScriptedEngine() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  SubmitResult submit(Request request, DeltaSink sink) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_) return {SubmitStatus::kDraining, "draining"};
    if (int64_t(live_.size()) >= options_.max_queue)
      return {SubmitStatus::kQueueFull, std::to_string(live_.size()) + " waiting"};
    if (int64_t(request.prompt.size()) + request.params.max_tokens > options_.context_length)
      return {SubmitStatus::kInvalid, "prompt + max_tokens exceeds the context"};
    Live live{std::move(request), std::move(sink), {}};
    for (int64_t i = 0; i < live.request.params.n; ++i)
      live.choices.push_back(Choice{io::StreamDecoder(tokenizer_), {}, 0, false});
    submitted_.push_back(live.request);
    live_.push_back(std::move(live));
    wake_.notify_all();
    return {};
  }

  void cancel(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    cancel_requests_.insert(id);
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    EngineStats s;
    s.running = paused_ ? 0 : int64_t(live_.size());
    s.waiting = paused_ ? int64_t(live_.size()) : 0;
    s.kv_blocks_total = 100;
    s.kv_blocks_used = 7;
    s.kv_block_size = 16;
    s.prefix_queries = 8;
    s.prefix_hits = 2;
    s.preemptions = 3;
    s.generated_tokens = generated_;
    s.prompt_tokens = prompt_tokens_;
    return s;
  }
  const io::Tokenizer& tokenizer() const override { return tokenizer_; }
  int64_t context_length() const override { return options_.context_length; }
  std::optional<int64_t> eos_token_id() const override { return options_.eos; }

  // Paused: requests stay queued (for queue-full and disconnect-while-waiting tests).
  void pause(bool paused) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      paused_ = paused;
    }
    wake_.notify_all();
  }
  void drain() {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
  }
  // Ids whose request ended by cancel(), and the requests as submitted.
  std::vector<std::string> cancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
  }
  std::vector<Request> submitted() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return submitted_;
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.size();
  }

 private:
  struct Choice {
    io::StreamDecoder decoder;
    std::string held;  // text withheld while stop strings could still match
    int64_t generated = 0;
    bool done = false;
  };
  struct Live {
    Request request;
    DeltaSink sink;
    std::vector<Choice> choices;
  };

  // One step of choice `i` of `live`: the delta it produces.
  Delta step(Live& live, size_t i) {
    Choice& c = live.choices[i];
    const Request& r = live.request;
    const int64_t k = c.generated++;
    const int64_t token = r.prompt[size_t(k + int64_t(i)) % r.prompt.size()];
    Delta d;
    d.index = int64_t(i);
    d.tokens = {token};
    d.prompt_tokens = int64_t(r.prompt.size());
    d.completion_tokens = c.generated;
    if (r.params.logprobs) {
      const double lp = -double(k + 1) / 8;
      TokenLogprob t{token, lp, {}};
      const std::vector<std::pair<int64_t, double>> alternatives = {
          {token, lp}, {(token + 1) % tokenizer_.vocab_size(), lp - 1}};
      for (int64_t a = 0; a < std::min<int64_t>(*r.params.logprobs, 2); ++a)
        t.top.push_back(alternatives[size_t(a)]);
      d.logprobs = {t};
    }
    const auto& stops = r.params.stop_token_ids;
    const bool eos = options_.eos && token == *options_.eos && !r.params.ignore_eos;
    if (eos || std::find(stops.begin(), stops.end(), token) != stops.end()) {
      d.finish = FinishReason::kStop;
    } else {
      c.held += c.decoder.push(int32_t(token));
      if (c.generated >= r.params.max_tokens) {
        c.held += c.decoder.finish();
        d.finish = FinishReason::kLength;
      }
      for (const std::string& s : r.params.stop) {
        const size_t at = c.held.find(s);
        if (at != std::string::npos) c.held.resize(at), d.finish = FinishReason::kStop;
      }
    }
    if (r.params.stop.empty() || d.finish != FinishReason::kNone) d.text.swap(c.held);
    c.done = d.finish != FinishReason::kNone;
    return d;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, options_.step, [&] { return stop_; });
      for (auto it = live_.begin(); it != live_.end();) {
        const bool cancelled = cancel_requests_.erase(it->request.id) > 0;
        if (!cancelled && paused_) {
          ++it;
          continue;
        }
        bool all_done = true;
        for (size_t i = 0; i < it->choices.size(); ++i) {
          if (it->choices[i].done) continue;
          Delta d;
          if (cancelled) {
            d.index = int64_t(i);
            d.finish = FinishReason::kCancelled;
            it->choices[i].done = true;
          } else {
            if (it->choices[i].generated == 0 && i == 0)
              prompt_tokens_ += int64_t(it->request.prompt.size());
            d = step(*it, i);
            ++generated_;
          }
          it->sink(d);
          all_done = all_done && it->choices[i].done;
        }
        if (cancelled) cancelled_.push_back(it->request.id);
        it = all_done ? live_.erase(it) : std::next(it);
      }
    }
    for (Live& live : live_) {  // shutting down: every open choice ends cancelled
      for (size_t i = 0; i < live.choices.size(); ++i) {
        if (live.choices[i].done) continue;
        Delta d;
        d.index = int64_t(i);
        d.finish = FinishReason::kCancelled;
        live.sink(d);
      }
    }
  }

  io::Tokenizer tokenizer_;
  Options options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Live> live_;
  std::set<std::string> cancel_requests_;
  std::vector<std::string> cancelled_;
  std::vector<Request> submitted_;
  int64_t generated_ = 0, prompt_tokens_ = 0;
  bool paused_ = false, draining_ = false, stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace tessel::serve::test
