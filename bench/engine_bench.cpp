// SPDX-License-Identifier: Apache-2.0
// The serving engine in-process (no HTTP): output tokens/s of GPT-2 124M's shape (random
// weights) at 1, 4, 16 and 64 concurrent requests of 32 prompt and 64 output tokens, with the
// batch-invariant kernels on and off, against `generate` running the same requests one at a time.
// The HTTP-level figures come from `tessel bench serve` (docs/SERVING.md). With
// TESSEL_ENGINE_PROFILE=C it instead profiles one wave of C requests: wall and CPU time per
// engine step, and the engine's phases and kernels per step (core/profile.h). With
// TESSEL_ENGINE_TP=1 under `mpirun -np N` the profiled engine is tensor parallel over the N ranks
// (rank 0 profiles; the others follow its steps), so the per-step cost of sending the step and
// gathering the logits stands beside the one-rank figures of the same command.
// TESSEL_ENGINE_KV_DTYPE=bf16 keeps the KV pool in 16 bits.
#include <benchmark/benchmark.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "tessel/core/profile.h"
#include "tessel/core/rng.h"
#include "tessel/core/threads.h"
#include "tessel/dist/world.h"
#include "tessel/io/byte_level.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/generation.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/serve/engine.h"
#include "tessel/serve/engine_follower.h"
#include "tessel/train/model_tensor_parallel.h"

namespace {

using namespace tessel;

// Prompt and output tokens per request. The profile takes others from TESSEL_ENGINE_PROMPT and
// TESSEL_ENGINE_OUTPUT (`tessel bench serve`'s workload: 64 and 128).
int64_t prompt_tokens = 32, output_tokens = 64;

std::shared_ptr<models::CausalLM> gpt2_124m() {
  static std::shared_ptr<models::CausalLM> model = [] {
    models::GPT2Config c;  // the 124M defaults
    c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
    Generator g(1);
    auto m = models::GPT2::random(c, g);
    m->eval();
    return std::shared_ptr<models::CausalLM>(m);
  }();
  return model;
}

// A byte-level vocabulary: the engine needs a tokenizer for text; ids >= 256 decode to nothing.
io::Tokenizer byte_tokenizer() {
  io::TokenizerConfig c;
  c.source = "bytes";
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    io::append_utf8(io::byte_to_unicode(uint8_t(b)), spelling);
    c.vocab.push_back(spelling);
  }
  return io::Tokenizer(c);
}

std::vector<int64_t> prompt(uint64_t seed) {
  std::vector<int64_t> ids(prompt_tokens);
  for (int64_t i = 0; i < prompt_tokens; ++i)
    ids[size_t(i)] = int64_t(uniform_at(seed, 0, uint64_t(i)) * 50000.0f);
  return ids;
}

serve::EngineOptions engine_options(bool deterministic) {
  serve::EngineOptions options;
  options.deterministic = deterministic;
  options.max_seqs = 64;
  options.max_batch_tokens = 512;
  options.kv_cache_bytes = int64_t(1) << 30;
  // TESSEL_ENGINE_KV_DTYPE=bf16|f16: the pool in 16 bits (`serve --kv-cache-dtype`).
  if (const char* kv = std::getenv("TESSEL_ENGINE_KV_DTYPE")) options.kv_cache_dtype = kv;
  return options;
}

// Submits `concurrency` requests at once and waits for all of them.
void run_wave(serve::Engine& engine, int64_t concurrency) {
  std::mutex mu;
  std::condition_variable cv;
  int64_t done = 0;
  for (int64_t r = 0; r < concurrency; ++r) {
    serve::Request req;
    req.id = std::to_string(r);
    req.prompt = prompt(uint64_t(r));
    req.params.max_tokens = output_tokens;
    req.params.temperature = 0.0;
    req.params.ignore_eos = true;
    engine.submit(req, [&](const serve::Delta& d) {
      if (d.finish == serve::FinishReason::kNone) return;
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == concurrency; });
}

void BM_Engine(benchmark::State& state) {
  const int64_t concurrency = state.range(0);
  serve::Engine engine(gpt2_124m(), byte_tokenizer(), engine_options(state.range(1) != 0));
  engine.start();
  int64_t tokens = 0;
  for (auto _ : state) {
    run_wave(engine, concurrency);
    tokens += concurrency * output_tokens;
  }
  state.counters["output_tok/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Engine)
    ->ArgNames({"concurrency", "invariant"})
    ->ArgsProduct({{1, 4, 16, 64}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

// The same requests through generate(), one at a time (the single-stream baseline).
void BM_GenerateOneAtATime(benchmark::State& state) {
  int64_t tokens = 0;
  for (auto _ : state) {
    for (int64_t r = 0; r < 4; ++r) {
      models::GenerationOptions g;
      g.max_new_tokens = output_tokens;
      g.sampling.temperature = 0.0;
      tokens += int64_t(models::generate(*gpt2_124m(), prompt(uint64_t(r)), g).tokens.size());
    }
  }
  state.counters["output_tok/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GenerateOneAtATime)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

// With TESSEL_ENGINE_PROFILE=C (C concurrent requests; TESSEL_ENGINE_DETERMINISTIC=1 for the
// invariant kernels): one wave with core/profile.h on, then the time per engine phase and per
// kernel, per step, instead of the benchmarks.
int profile_engine(int64_t concurrency, bool deterministic, bool tensor_parallel) {
  std::shared_ptr<models::CausalLM> model = gpt2_124m();
  std::shared_ptr<serve::StepMirror> mirror;
  if (tensor_parallel) {
    dist::CommPtr world = dist::init_world();
    auto tp = std::make_shared<train::ModelTensorParallel>(
        train::parallelize_model(*model, world, "", false));
    mirror = std::make_shared<serve::StepMirror>(
        world, [tp](const Tensor& local) { return train::model_tp_full_logits(*tp, local); });
    if (world->rank() != 0) {
      serve::EngineFollower(model, engine_options(deterministic), mirror).run();
      return 0;
    }
    std::printf("tensor parallel over %d ranks\n", world->size());
  }
  serve::Engine engine(model, byte_tokenizer(), engine_options(deterministic), mirror);
  engine.start();
  run_wave(engine, concurrency);  // warm-up: allocations, kernel dispatch
  profile::reset();
  profile::set_enabled(true);
  const double cpu_start = double(std::clock()) / CLOCKS_PER_SEC;
  const auto start = std::chrono::steady_clock::now();
  const int64_t steps_before = engine.stats().steps;
  run_wave(engine, concurrency);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  profile::set_enabled(false);
  const double cpu = double(std::clock()) / CLOCKS_PER_SEC - cpu_start;
  const int64_t steps = engine.stats().steps - steps_before;
  std::printf(
      "concurrency %lld, %s: %lld steps, %.1f ms per step (%.1f ms of CPU), %.1f output tok/s\n",
      (long long)concurrency, deterministic ? "invariant" : "default", (long long)steps,
      1e3 * wall / double(steps), 1e3 * cpu / double(steps),
      double(concurrency * output_tokens) / wall);
  // CPU columns: the engine thread's own CPU time (core/profile.h), the figure to read on a loaded
  // machine; with TESSEL_NUM_THREADS=1 the kernels run on that thread and it is the whole step.
  std::printf("%-44s %8s %10s %10s %8s %9s\n", "name", "calls", "ms/step", "CPU ms/step",
              "CPU share", "GFLOP/s");
  double forward_cpu = 0, kernels_cpu = 0, phases_cpu = 0;
  for (const profile::Entry& e : profile::snapshot()) {
    std::printf("%-44s %8lld %10.3f %10.3f %7.1f%% %9.1f\n", e.name.c_str(), (long long)e.calls,
                1e3 * e.seconds / double(steps), 1e3 * e.cpu_seconds / double(steps),
                100.0 * e.cpu_seconds / cpu,
                e.flops > 0 && e.cpu_seconds > 0 ? e.flops / e.cpu_seconds * 1e-9 : 0.0);
    if (e.name == "engine.forward")
      forward_cpu = e.cpu_seconds;
    else if (e.name.rfind("engine.", 0) == 0)
      phases_cpu += e.cpu_seconds;
    else
      kernels_cpu += e.cpu_seconds;
  }
  std::printf(
      "forward outside the kernels: %.3f CPU ms/step; engine phases outside the forward: "
      "%.3f CPU ms/step\n",
      1e3 * (forward_cpu - kernels_cpu) / double(steps), 1e3 * phases_cpu / double(steps));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The threads as `tessel serve` runs them: the GEMM library's OpenMP threads sleep between
  // regions (spinning, they took the polling pool's core: 54 ms a 16-request step against 43),
  // and the pool polls between regions (without it every small op waits for a wake-up).
  tessel::wait_passively_by_default(argv);
  tessel::poll_between_regions_by_default();
  if (const char* c = std::getenv("TESSEL_ENGINE_PROFILE")) {
    if (const char* p = std::getenv("TESSEL_ENGINE_PROMPT")) prompt_tokens = std::atoll(p);
    if (const char* o = std::getenv("TESSEL_ENGINE_OUTPUT")) output_tokens = std::atoll(o);
    const char* det = std::getenv("TESSEL_ENGINE_DETERMINISTIC");
    const char* tp = std::getenv("TESSEL_ENGINE_TP");
    return profile_engine(std::atoll(c), det != nullptr && std::string(det) == "1",
                          tp != nullptr && std::string(tp) == "1");
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
