// SPDX-License-Identifier: Apache-2.0
// The serving engine in-process (no HTTP): output tokens/s of GPT-2 124M's shape (random
// weights) at 1, 4, 16 and 64 concurrent requests of 32 prompt and 64 output tokens, with the
// batch-invariant kernels on and off, against `generate` running the same requests one at a time.
// The HTTP-level figures come from `tessel bench serve` (docs/SERVING.md).
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <mutex>

#include "tessel/core/rng.h"
#include "tessel/io/byte_level.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/generation.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/serve/engine.h"

namespace {

using namespace tessel;

constexpr int64_t kPrompt = 32, kOutput = 64;

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
  std::vector<int64_t> ids(kPrompt);
  for (int64_t i = 0; i < kPrompt; ++i)
    ids[size_t(i)] = int64_t(uniform_at(seed, 0, uint64_t(i)) * 50000.0f);
  return ids;
}

void BM_Engine(benchmark::State& state) {
  const int64_t concurrency = state.range(0);
  serve::EngineOptions options;
  options.deterministic = state.range(1) != 0;
  options.max_seqs = 64;
  options.max_batch_tokens = 512;
  options.kv_cache_bytes = int64_t(1) << 30;
  serve::Engine engine(gpt2_124m(), byte_tokenizer(), options);
  engine.start();
  int64_t tokens = 0;
  for (auto _ : state) {
    std::mutex mu;
    std::condition_variable cv;
    int64_t done = 0;
    for (int64_t r = 0; r < concurrency; ++r) {
      serve::Request req;
      req.id = std::to_string(r);
      req.prompt = prompt(uint64_t(r));
      req.params.max_tokens = kOutput;
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
    tokens += concurrency * kOutput;
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
      g.max_new_tokens = kOutput;
      g.sampling.temperature = 0.0;
      tokens += int64_t(models::generate(*gpt2_124m(), prompt(uint64_t(r)), g).tokens.size());
    }
  }
  state.counters["output_tok/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GenerateOneAtATime)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
