// SPDX-License-Identifier: Apache-2.0
// Cross-step pipelining in the engine (serve/step_groups.h, serve/engine_groups.cpp): requests
// spread over G groups with one step each in flight give every request bitwise the tokens and
// logprobs of the one-group engine (greedy and seeded sampling, chunked prefill, prefix hits,
// n = 2), cancellation of a request whose step is in flight frees its blocks, and the placement
// of 7 requests over 3 groups. The pipeline is a stand-in that computes each forward only when
// its logits are collected (after the engine has started the other groups' steps), in the order
// the forwards began, as the stages of `serve --pp` do.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "common/tokenizer_test_util.h"
#include "serve/engine_test_util.h"
#include "tessel/core/rng.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"
#include "tessel/serve/engine.h"
#include "tessel/serve/pipelined_forward.h"
#include "tessel/serve/step_groups.h"

namespace tessel::serve {
namespace {

using engine_testing::Collector;
using engine_testing::Output;
using engine_testing::output_of;
using engine_testing::prompt_of;

std::shared_ptr<models::CausalLM> tiny_gpt2() {
  Generator g(21);
  return models::GPT2::random(engine_testing::tiny_gpt2_config(3), g);
}

std::shared_ptr<models::CausalLM> tiny_llama() {
  Generator g(22);
  return models::Llama::random(engine_testing::tiny_llama_config(), g);
}

// A model whose forward runs when end_forward collects it, not when begin_forward starts it.
class DeferredModel final : public models::CausalLM, public PipelinedForward {
 public:
  explicit DeferredModel(std::shared_ptr<models::CausalLM> inner)
      : CausalLM("Deferred"), inner_(std::move(inner)) {
    register_module("inner", inner_);
  }
  int64_t begin_forward(const Tensor& ids, models::DecodeCache& cache,
                        const Tensor& rows) override {
    queue_.push_back(
        [this, ids, &cache, rows] { return inner_->forward_cached(ids, cache, rows); });
    most_in_flight = std::max(most_in_flight, int64_t(queue_.size()));
    ++begun;
    return next_++;
  }
  Tensor end_forward(int64_t ticket) override {
    EXPECT_EQ(ticket, next_ - int64_t(queue_.size())) << "forwards finish in the order they began";
    Tensor logits = queue_.front()();
    queue_.pop_front();
    return logits;
  }
  Tensor forward_cached(const Tensor& ids, models::DecodeCache& cache,
                        const Tensor& rows) override {
    return inner_->forward_cached(ids, cache, rows);
  }
  const models::ModelConfig& model_config() const override { return inner_->model_config(); }
  models::KVCache make_cache(int64_t batch, int64_t capacity) const override {
    return inner_->make_cache(batch, capacity);
  }
  Tensor embed(const Tensor& ids) override { return inner_->embed(ids); }
  Tensor block(int64_t i, const Tensor& h) override { return inner_->block(i, h); }
  Tensor head(const Tensor& h) override { return inner_->head(h); }
  int64_t layer_of_parameter(const std::string& n) const override {
    return inner_->layer_of_parameter(n);
  }
  std::vector<std::string> head_tied_parameters() const override {
    return inner_->head_tied_parameters();
  }
  std::vector<std::string> unit_paths() const override { return inner_->unit_paths(); }
  std::vector<double> layer_costs() const override { return inner_->layer_costs(); }
  void set_recompute(nn::Recompute m) override { inner_->set_recompute(m); }
  void set_block_recompute(int64_t i, nn::Recompute m) override {
    inner_->set_block_recompute(i, m);
  }
  nn::Recompute recompute() const override { return inner_->recompute(); }

  int64_t most_in_flight = 0;  // read after the engine has stopped
  std::atomic<int64_t> begun{0};

 private:
  std::shared_ptr<models::CausalLM> inner_;
  std::deque<std::function<Tensor()>> queue_;
  int64_t next_ = 0;
};

// 7 requests: greedy and seeded sampling with logprobs, one with n = 2, three sharing a
// 16-token prefix (prefix-cache hits), prompts of 5 to 33 tokens in chunks of up to 11 tokens.
std::vector<Request> seven_requests() {
  std::vector<Request> out;
  for (int i = 0; i < 7; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = prompt_of(5 + (i * 13) % 29, 40 + uint64_t(i));
    if (i % 3 == 0) {
      std::vector<int64_t> p = prompt_of(16, 9);
      p.push_back(i);
      r.prompt = p;
    }
    r.params.max_tokens = 7 + (i * 5) % 13;
    r.params.temperature = i % 2 == 0 ? 0.0 : 0.9;
    r.params.seed = 100 + i;
    r.params.logprobs = 2;
    r.params.n = i == 3 ? 2 : 1;
    r.params.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

// Runs the requests (all queued before the engine starts) and returns each choice's output.
std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>> run(
    std::shared_ptr<models::CausalLM> model, int64_t groups) {
  EngineOptions o;
  o.deterministic = true;
  o.max_batch_tokens = 11;
  o.block_size = 4;
  o.step_groups = groups;
  Engine engine(std::move(model), io::Tokenizer(io::small_config()), o);
  Collector c;
  const std::vector<Request> requests = seven_requests();
  for (const Request& r : requests)
    EXPECT_EQ(engine.submit(r, c.sink(r.id)).status, SubmitStatus::kAccepted);
  engine.start();
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>> out;
  for (const Request& r : requests) {
    c.wait(r.id, r.params.n);
    for (int64_t k = 0; k < r.params.n; ++k) {
      const Output o = output_of(c.of(r.id, k));
      out[r.id + "/" + std::to_string(k)] = {o.tokens, o.logprobs};
      EXPECT_EQ(int64_t(out[r.id + "/" + std::to_string(k)].first.size()), r.params.max_tokens);
    }
  }
  engine.drain(std::chrono::milliseconds(1000));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  return out;
}

TEST(StepGroups, SevenRequestsOverThreeGroups) {
  // Each request (one sequence) joins the least loaded group, the lowest index among equals.
  std::vector<int64_t> loads(3, 0);
  std::vector<int> placed;
  for (int i = 0; i < 7; ++i) {
    const int g = least_loaded_group(loads);
    placed.push_back(g);
    ++loads[size_t(g)];
    if (i == 3) loads[1] -= 1;  // a request of group 1 ends: the next joins group 1
  }
  EXPECT_EQ(placed, (std::vector<int>{0, 1, 2, 0, 1, 1, 2}));
  EXPECT_EQ(loads, (std::vector<int64_t>{2, 2, 2}));
  // A request of n = 3 choices counts 3.
  EXPECT_EQ(least_loaded_group(std::vector<int64_t>{3, 1, 1}), 1);
  EXPECT_THROW(least_loaded_group(std::vector<int64_t>{}), Error);
}

TEST(StepGroups, SequenceLimitSharedOut) {
  EXPECT_EQ(group_max_seqs(7, 3, 0), 3);
  EXPECT_EQ(group_max_seqs(7, 3, 1), 2);
  EXPECT_EQ(group_max_seqs(7, 3, 2), 2);
  EXPECT_EQ(group_max_seqs(64, 2, 1), 32);
  EXPECT_EQ(group_max_seqs(13, 1, 0), 13);
  EXPECT_THROW(group_max_seqs(7, 3, 3), Error);
  EXPECT_THROW(group_max_seqs(0, 3, 0), Error);
}

TEST(EngineGroups, ThreeGroupsInFlightEqualOneGroupBitwise) {
  for (auto model : {tiny_gpt2(), tiny_llama()}) {
    const auto expected = run(model, 1);
    auto deferred = std::make_shared<DeferredModel>(model);
    const auto got = run(deferred, 3);
    EXPECT_EQ(deferred->most_in_flight, 3);
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [id, want] : expected) {
      const auto& have = got.at(id);
      EXPECT_EQ(have.first, want.first) << id;
      ASSERT_EQ(have.second.size(), want.second.size()) << id;
      for (size_t i = 0; i < want.second.size(); ++i)
        EXPECT_EQ(std::memcmp(&have.second[i], &want.second[i], sizeof(double)), 0)
            << id << " logprob " << i << ": " << have.second[i] << " vs " << want.second[i];
    }
  }
}

TEST(EngineGroups, CancelWhileInFlightFreesEveryBlock) {
  auto deferred = std::make_shared<DeferredModel>(tiny_gpt2());
  EngineOptions o;
  o.step_groups = 2;
  o.block_size = 4;
  Engine engine(deferred, io::Tokenizer(io::small_config()), o);
  engine.start();
  Collector c;
  std::mutex mu;
  std::condition_variable cv;
  int64_t deltas = 0;
  for (int i = 0; i < 5; ++i) {
    Request r;
    r.id = "c" + std::to_string(i);
    r.prompt = prompt_of(7 + i, 60 + uint64_t(i));
    r.params.max_tokens = 80;
    r.params.ignore_eos = true;
    auto sink = c.sink(r.id);
    ASSERT_EQ(engine
                  .submit(r,
                          [&, sink](const Delta& d) {
                            sink(d);
                            std::lock_guard<std::mutex> lock(mu);
                            ++deltas;
                            cv.notify_all();
                          })
                  .status,
              SubmitStatus::kAccepted);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return deltas >= 10; });
  }
  for (int i = 0; i < 5; ++i) engine.cancel("c" + std::to_string(i));
  for (int i = 0; i < 5; ++i) {
    const std::string id = "c" + std::to_string(i);
    c.wait(id, 1);
    const Output out = output_of(c.of(id, 0));
    EXPECT_EQ(out.finish, FinishReason::kCancelled) << id;
    EXPECT_LT(out.tokens.size(), 80u) << id;
  }
  engine.drain(std::chrono::milliseconds(1000));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  EXPECT_EQ(engine.stats().running, 0);
  EXPECT_EQ(deferred->most_in_flight, 2);
}

// Three requests of 31 + 8 tokens (10 blocks of 4 each) in three groups over a pool of 11 blocks,
// prompts in chunks of 8: each fits the pool alone, no two together. Without the anchor of
// serve/pool_priority.h the groups preempt each other's progress away forever (no request ends;
// the test cancels them after 3000 forwards); with it every request ends by length with the
// one-group engine's tokens.
std::map<std::string, Output> three_long_requests(std::shared_ptr<models::CausalLM> model,
                                                  int64_t groups, int64_t* preemptions) {
  EngineOptions o;
  o.deterministic = true;
  o.max_batch_tokens = 8;
  o.block_size = 4;
  o.max_model_len = 40;
  o.step_groups = groups;
  const models::KVCache probe = model->make_cache(1, 1);
  const models::KvGeometry geometry{probe.n_layer(), probe.kv_heads(), probe.head_dim()};
  o.kv_cache_bytes =
      11 * o.block_size * geometry.bytes_per_token(int64_t(dtype_size(probe.dtype())));
  auto* deferred = dynamic_cast<DeferredModel*>(model.get());
  Engine engine(std::move(model), io::Tokenizer(io::small_config()), o);
  Collector c;
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    Request r;
    r.id = "long" + std::to_string(i);
    r.prompt = prompt_of(31, 70 + uint64_t(i));
    r.params.max_tokens = 8;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    EXPECT_EQ(engine.submit(r, c.sink(r.id)).status, SubmitStatus::kAccepted);
    ids.push_back(r.id);
  }
  engine.start();
  const auto ended = [&](const std::string& id) {
    const std::vector<Delta> d = c.of(id);
    return !d.empty() && d.back().finish != FinishReason::kNone;
  };
  while (!std::all_of(ids.begin(), ids.end(), ended)) {
    if (deferred && deferred->begun.load() > 3000) {
      for (const std::string& id : ids) engine.cancel(id);  // stuck: end it
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::map<std::string, Output> out;
  for (const std::string& id : ids) {
    c.wait(id);
    out[id] = output_of(c.of(id));
  }
  *preemptions = engine.stats().preemptions;
  engine.drain(std::chrono::milliseconds(1000));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  return out;
}

TEST(EngineGroups, ThreeGroupsOverOneShortPoolAllFinish) {
  auto model = tiny_gpt2();
  int64_t preempted_alone = 0, preempted = 0;
  const auto want = three_long_requests(model, 1, &preempted_alone);
  const auto got = three_long_requests(std::make_shared<DeferredModel>(model), 3, &preempted);
  EXPECT_GT(preempted, 0) << "the pool was never short";
  for (const auto& [id, w] : want) {
    EXPECT_EQ(w.finish, FinishReason::kLength) << id;
    EXPECT_EQ(got.at(id).finish, FinishReason::kLength)
        << id << " (" << preempted << " preemptions)";
    EXPECT_EQ(got.at(id).tokens, w.tokens) << id;
  }
}

TEST(EngineGroups, RefusedWithoutAPipelinedModel) {
  EngineOptions o;
  o.step_groups = 2;
  EXPECT_THROW(Engine(tiny_gpt2(), io::Tokenizer(io::small_config()), o), Error);
  o.step_groups = 65;  // more groups than max_seqs 64
  EXPECT_THROW(
      Engine(std::make_shared<DeferredModel>(tiny_gpt2()), io::Tokenizer(io::small_config()), o),
      Error);
}

}  // namespace
}  // namespace tessel::serve
