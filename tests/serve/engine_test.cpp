// SPDX-License-Identifier: Apache-2.0
// The serving engine end to end on a small random GPT-2 and LLaMA, and their mixture-of-experts
// relatives (Mixtral, GPT-2-MoE): greedy output equals `generate`, a request's tokens and logprobs
// are bitwise the same alone and under load (chunked prefill, prefix-cache hits, preemption; for
// the MoE models each expert's GEMM then holds other requests' tokens too), n > 1 choices equal
// separate seeded requests, cancellation frees every block, and the queue answers with the right
// status.
#include "tessel/serve/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/tokenizer_test_util.h"
#include "serve/engine_test_util.h"
#include "tessel/core/rng.h"
#include "tessel/models/family.h"
#include "tessel/models/generation.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama.h"

namespace tessel::serve {
namespace {

using engine_testing::Collector;
using engine_testing::Output;
using engine_testing::output_of;
using engine_testing::prompt_of;
using engine_testing::tiny_gpt2_config;
using engine_testing::tiny_llama_config;

std::shared_ptr<models::CausalLM> tiny_gpt2() {
  Generator g(11);
  return models::GPT2::random(tiny_gpt2_config(), g);
}

std::shared_ptr<models::CausalLM> tiny_llama() {
  Generator g(12);
  return models::Llama::random(tiny_llama_config(), g);
}

// Mixtral: the LLaMA above with 5 SwiGLU experts of 13 per layer, top-2.
std::shared_ptr<models::CausalLM> tiny_mixtral() {
  models::LlamaConfig c = tiny_llama_config();
  c.variant = models::LlamaVariant::Mixtral;
  c.intermediate_size = 13;
  c.num_local_experts = 5;
  c.num_experts_per_tok = 2;
  Generator g(13);
  auto model = models::Llama::random(c, g);
  model->eval();
  return model;
}

// GPT-2-MoE: the GPT-2 above with 4 GELU experts in its second block, top-2, and a capacity that
// would drop pairs in training (inference computes every pair, whatever else the batch holds).
std::shared_ptr<models::CausalLM> tiny_gpt2_moe() {
  models::GPT2Config c = tiny_gpt2_config();
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.capacity_factor = 0.5;
  Generator g(14);
  auto model = models::GPT2::random(c, g);
  model->eval();
  return model;
}

// Waits until the engine has nothing left to run (its stats are published after each step).
EngineStats idle_stats(const Engine& engine) {
  for (int i = 0; i < 2000; ++i) {
    const EngineStats st = engine.stats();
    if (st.running == 0 && st.waiting == 0) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return engine.stats();
}

Request request(const std::string& id, std::vector<int64_t> prompt, int64_t max_tokens,
                double temperature = 0.0, std::optional<uint64_t> seed = std::nullopt) {
  Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.params.max_tokens = max_tokens;
  r.params.temperature = temperature;
  r.params.seed = seed;
  r.params.ignore_eos = true;
  return r;
}

Output run_alone(std::shared_ptr<models::CausalLM> model, Request r, EngineOptions options = {}) {
  Engine engine(std::move(model), io::Tokenizer(io::small_config()), options);
  engine.start();
  Collector c;
  const std::string id = r.id;
  EXPECT_EQ(engine.submit(std::move(r), c.sink(id)).status, SubmitStatus::kAccepted);
  c.wait(id);
  return output_of(c.of(id));
}

TEST(Engine, GreedyEqualsGenerate) {
  for (auto model : {tiny_gpt2(), tiny_llama(), tiny_mixtral(), tiny_gpt2_moe()}) {
    const std::vector<int64_t> prompt = prompt_of(13, 3);
    models::GenerationOptions g;
    g.max_new_tokens = 21;
    g.sampling.temperature = 0.0;
    const models::GenerationResult expected = models::generate(*model, prompt, g);
    const Output got = run_alone(model, request("a", prompt, 21));
    EXPECT_EQ(got.tokens, expected.tokens);
    EXPECT_EQ(got.finish, FinishReason::kLength);
    EXPECT_EQ(got.text, io::Tokenizer(io::small_config())
                            .decode(std::vector<int32_t>(got.tokens.begin(), got.tokens.end())));
  }
}

// A seeded sampled request with logprobs, then the same request among 32 others with chunked
// prefill, a shared prefix and a KV pool small enough to preempt: bitwise the same.
// `kv`: the pool's dtype (EngineOptions::kv_cache_dtype).
void expect_batch_invariant(std::shared_ptr<models::CausalLM> model,
                            const std::string& kv = "auto") {
  Request probe = request("probe", prompt_of(33, 5), 24, 0.8, 77);
  probe.params.logprobs = 3;
  EngineOptions invariant;
  invariant.deterministic = true;
  invariant.kv_cache_dtype = kv;
  const Output alone = run_alone(model, probe, invariant);
  ASSERT_EQ(alone.tokens.size(), 24u);

  EngineOptions busy;
  busy.deterministic = true;
  busy.kv_cache_dtype = kv;
  busy.max_batch_tokens = 19;  // prompts arrive in chunks
  busy.max_seqs = 33;
  busy.block_size = 4;
  // 60 blocks: preemption under load.
  const int64_t elem = kv == "auto" || kv == "f32" ? 4 : 2;
  busy.kv_cache_bytes = 60 * 4 * model->model_config().kv_geometry().bytes_per_token(elem);
  Engine engine(model, io::Tokenizer(io::small_config()), busy);
  Collector c;
  for (int i = 0; i < 32; ++i) {
    // Half share the probe's first 20 tokens (prefix-cache hits), the rest are unrelated.
    std::vector<int64_t> p = prompt_of(7 + i % 29, 100 + uint64_t(i));
    if (i % 2 == 0) {
      p = prompt_of(33, 5);
      p.resize(20);
      p.push_back(i);
    }
    Request r = request("r" + std::to_string(i), p, 9 + i % 13, i % 3 == 0 ? 0.0 : 1.0, i);
    ASSERT_EQ(engine.submit(r, c.sink(r.id)).status, SubmitStatus::kAccepted);
    if (i == 16) {
      ASSERT_EQ(engine.submit(probe, c.sink("probe")).status, SubmitStatus::kAccepted);
    }
  }
  engine.start();
  c.wait("probe");
  for (int i = 0; i < 32; ++i) c.wait("r" + std::to_string(i));
  const Output loaded = output_of(c.of("probe"));
  EXPECT_EQ(loaded.tokens, alone.tokens);
  ASSERT_EQ(loaded.logprobs.size(), alone.logprobs.size());
  for (size_t i = 0; i < alone.logprobs.size(); ++i)
    EXPECT_EQ(std::memcmp(&loaded.logprobs[i], &alone.logprobs[i], sizeof(double)), 0)
        << "logprob " << i << ": " << loaded.logprobs[i] << " vs " << alone.logprobs[i];
  const EngineStats st = idle_stats(engine);
  EXPECT_GT(st.prefix_hits, 0);
  EXPECT_GT(st.preemptions, 0);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.requests_finished, 33);
}

TEST(Engine, RequestIsBatchInvariant) {
  for (auto model : {tiny_gpt2(), tiny_mixtral(), tiny_gpt2_moe()}) {
    SCOPED_TRACE(std::string(model->model_config().family().name()));
    expect_batch_invariant(model);
  }
}

// A 16-bit pool under an f32 model (`--kv-cache-dtype`): the request is still batch-invariant
// (the keys and values are rounded as they are stored, whatever else is in the step).
TEST(Engine, RequestIsBatchInvariantOverA16BitPool) {
  for (const char* kv : {"bf16", "f16"}) {
    SCOPED_TRACE(kv);
    expect_batch_invariant(tiny_gpt2(), kv);
  }
}

// The 16-bit pool holds twice the tokens in the same bytes, and its greedy logprobs follow the
// f32 pool's within the rounding of the keys and values; a dtype the kernels do not read is
// refused when the engine starts.
TEST(Engine, SixteenBitPoolHalvesTheBytesAndFollowsTheF32Pool) {
  auto model = tiny_gpt2();
  Request r = request("a", prompt_of(29, 8), 12);
  r.params.logprobs = 1;
  EngineOptions f32;
  f32.kv_cache_bytes = 64 * 16 * model->model_config().kv_geometry().bytes_per_token(4);
  const Output want = run_alone(model, r, f32);
  for (const char* kv : {"bf16", "f16"}) {
    SCOPED_TRACE(kv);
    EngineOptions half = f32;
    half.kv_cache_dtype = kv;
    Engine engine(model, io::Tokenizer(io::small_config()), half);
    EXPECT_EQ(engine.stats().kv_blocks_total, 128);
    const Output got = run_alone(model, r, half);
    ASSERT_EQ(got.tokens.size(), want.tokens.size());
    // Compare while the greedy tokens agree (a near tie may flip one, and then the rest differ).
    size_t same = 0;
    while (same < want.tokens.size() && got.tokens[same] == want.tokens[same]) ++same;
    EXPECT_GE(same, 4u);
    // Two entries a token: its logprob and its top-1 (the same token) + id.
    ASSERT_EQ(got.logprobs.size(), 2 * got.tokens.size());
    bool differs = false;
    for (size_t i = 0; i < 2 * same; ++i) {
      EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 0.02) << "entry " << i;
      differs |= got.logprobs[i] != want.logprobs[i];
    }
    EXPECT_TRUE(differs) << "the rounded keys and values change no logprob";
  }
  EngineOptions bad;
  bad.kv_cache_dtype = "i8";
  EXPECT_THROW(Engine(model, io::Tokenizer(io::small_config()), bad), Error);
}

TEST(Engine, ChoicesEqualSeparateSeededRequests) {
  auto model = tiny_llama();
  Request r = request("n3", prompt_of(18, 8), 12, 1.0, 40);
  r.params.n = 3;
  EngineOptions invariant;  // three choices decode together; each alone decodes by itself
  invariant.deterministic = true;
  Engine engine(model, io::Tokenizer(io::small_config()), invariant);
  engine.start();
  Collector c;
  ASSERT_EQ(engine.submit(r, c.sink("n3")).status, SubmitStatus::kAccepted);
  c.wait("n3", 3);
  for (int64_t i = 0; i < 3; ++i) {
    const Output alone =
        run_alone(model, request("one", prompt_of(18, 8), 12, 1.0, 40 + i), invariant);
    EXPECT_EQ(output_of(c.of("n3", i)).tokens, alone.tokens) << "choice " << i;
  }
}

TEST(Engine, StopTokenAndStopStringEndTheChoice) {
  auto model = tiny_gpt2();
  const Output free_run = run_alone(model, request("free", prompt_of(9, 4), 16));
  ASSERT_EQ(free_run.tokens.size(), 16u);
  Request stop_id = request("id", prompt_of(9, 4), 16);
  stop_id.params.stop_token_ids = {free_run.tokens[5]};
  const Output by_id = run_alone(model, stop_id);
  const auto first = std::find(free_run.tokens.begin(), free_run.tokens.end(), free_run.tokens[5]);
  EXPECT_EQ(by_id.tokens, std::vector<int64_t>(free_run.tokens.begin(), first + 1));
  EXPECT_EQ(by_id.finish, FinishReason::kStop);
  const io::Tokenizer tok(io::small_config());
  const std::string text =
      tok.decode(std::vector<int32_t>(free_run.tokens.begin(), free_run.tokens.end()));
  // A stop string of two ASCII characters from the output (random bytes decode partly to U+FFFD).
  std::string stop;
  for (size_t i = 1; i + 1 < text.size() && stop.empty(); ++i)
    if (text[i] > ' ' && text[i] < 0x7f && text[i + 1] > ' ' && text[i + 1] < 0x7f)
      stop = text.substr(i, 2);
  if (stop.empty()) stop = "\xEF\xBF\xBD";
  ASSERT_NE(text.find(stop), std::string::npos) << "no usable stop string in the output";
  Request stop_text = request("text", prompt_of(9, 4), 16);
  stop_text.params.stop = {stop};
  const Output by_text = run_alone(model, stop_text);
  EXPECT_EQ(by_text.text, text.substr(0, text.find(stop)));
  EXPECT_EQ(by_text.finish, FinishReason::kStop);
}

TEST(Engine, CancelFreesEveryBlock) {
  Engine engine(tiny_gpt2(), io::Tokenizer(io::small_config()), {});
  engine.start();
  Collector c;
  std::mutex mu;
  bool first = false, cancel_sent = false;
  std::condition_variable cv;
  auto sink = c.sink("long");
  // The engine's thread holds at the first delta until the cancel is queued: on a loaded machine
  // it could otherwise decode all 70 tokens before this thread runs again.
  ASSERT_EQ(engine
                .submit(request("long", prompt_of(20, 9), 70),
                        [&](const Delta& d) {
                          sink(d);
                          std::unique_lock<std::mutex> lock(mu);
                          if (first) return;
                          first = true;
                          cv.notify_all();
                          cv.wait(lock, [&] { return cancel_sent; });
                        })
                .status,
            SubmitStatus::kAccepted);
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return first; });
  }
  engine.cancel("long");
  {
    std::lock_guard<std::mutex> lock(mu);
    cancel_sent = true;
  }
  cv.notify_all();
  c.wait("long");
  EXPECT_EQ(output_of(c.of("long")).finish, FinishReason::kCancelled);
  EXPECT_LT(output_of(c.of("long")).tokens.size(), 70u);
  const EngineStats st = idle_stats(engine);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.running, 0);
}

TEST(Engine, SubmitAnswersInvalidFullAndDraining) {
  EngineOptions options;
  options.max_queue = 2;
  Engine engine(tiny_gpt2(), io::Tokenizer(io::small_config()), options);
  Collector c;
  EXPECT_EQ(engine.submit(request("long", prompt_of(90, 1), 8), c.sink("x")).status,
            SubmitStatus::kInvalid);  // 90 + 8 > 97 positions
  EXPECT_EQ(engine.submit(request("empty", {}, 8), c.sink("x")).status, SubmitStatus::kInvalid);
  Request bad = request("bad", prompt_of(5, 1), 8);
  bad.params.top_p = 0;
  const SubmitResult refused = engine.submit(bad, c.sink("x"));
  EXPECT_EQ(refused.status, SubmitStatus::kInvalid);
  EXPECT_NE(refused.message.find("top_p"), std::string::npos) << refused.message;
  Request broken = request("utf8", prompt_of(5, 1), 8);
  broken.params.stop = {"\xC3"};
  EXPECT_EQ(engine.submit(broken, c.sink("x")).status, SubmitStatus::kInvalid);
  // Not started: the queue fills.
  EXPECT_EQ(engine.submit(request("a", prompt_of(5, 1), 4), c.sink("a")).status,
            SubmitStatus::kAccepted);
  EXPECT_EQ(engine.submit(request("b", prompt_of(5, 2), 4), c.sink("b")).status,
            SubmitStatus::kAccepted);
  EXPECT_EQ(engine.submit(request("c", prompt_of(5, 3), 4), c.sink("c")).status,
            SubmitStatus::kQueueFull);
  engine.start();
  engine.drain(std::chrono::seconds(60));  // finishes what was accepted
  EXPECT_EQ(output_of(c.of("a")).finish, FinishReason::kLength);
  EXPECT_EQ(output_of(c.of("b")).tokens.size(), 4u);
  EXPECT_EQ(engine.submit(request("d", prompt_of(5, 4), 4), c.sink("d")).status,
            SubmitStatus::kDraining);
}

}  // namespace
}  // namespace tessel::serve
