// SPDX-License-Identifier: Apache-2.0
// Per-token cost of the serving sampler (serve::RequestSampler) on GPT-2's 50,257-entry
// vocabulary, against the simpler sampler `tessel generate` uses (models::Sampler, which sorts
// the whole vocabulary for top-p) as the naive peer in the same run. Two logit shapes: "zipf"
// (probabilities falling as rank^-1.1 over a shuffled vocabulary, like a language model's) and
// "normal" (N(0, 2^2): a flat, wide nucleus, the hard case for top-p).
//   build/bench/sampler_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "tessel/models/sampling.h"
#include "tessel/serve/sampler.h"

namespace tessel::serve {
namespace {

constexpr size_t kVocab = 50257;

const std::vector<float>& logits(int shape) {
  static const std::vector<std::vector<float>> rows = [] {
    std::mt19937_64 rng(7);
    std::vector<std::vector<float>> r(2, std::vector<float>(kVocab));
    std::vector<size_t> rank(kVocab);
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    for (size_t i = 0; i < kVocab; ++i) r[0][i] = float(-1.1 * std::log(double(rank[i]) + 1.0));
    std::normal_distribution<double> normal(0.0, 2.0);
    for (float& x : r[1]) x = float(normal(rng));
    return r;
  }();
  return rows[size_t(shape)];
}

// Arguments: shape (0 zipf, 1 normal), top_k, top_p x 100, logprobs (-1: none), temperature x 100.
void BM_RequestSampler(benchmark::State& state) {
  SamplingParams p;
  p.top_k = state.range(1);
  p.top_p = double(state.range(2)) / 100;
  if (state.range(3) >= 0) p.logprobs = state.range(3);
  p.temperature = double(state.range(4)) / 100;
  RequestSampler sampler(p, 1, {});
  const std::vector<float>& row = logits(int(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(row));
  state.SetLabel(state.range(0) == 0 ? "zipf" : "normal");
}
BENCHMARK(BM_RequestSampler)
    ->ArgNames({"shape", "top_k", "top_p", "logprobs", "temp"})
    ->Args({0, 0, 100, -1, 0})  // greedy
    ->Args({0, 0, 100, -1, 100})
    ->Args({0, 0, 90, -1, 100})
    ->Args({0, 50, 100, -1, 100})
    ->Args({0, 0, 100, 5, 100})
    ->Args({0, 0, 90, 5, 100})
    ->Args({1, 0, 90, -1, 100})
    ->Args({1, 0, 90, 5, 100})
    ->Unit(benchmark::kMicrosecond);

// Repetition, presence and frequency penalties over a 1,000-token prompt and the output so far,
// with top-p 0.9.
void BM_RequestSamplerPenalties(benchmark::State& state) {
  SamplingParams p;
  p.top_p = 0.9;
  p.repetition_penalty = 1.1;
  p.presence_penalty = 0.5;
  p.frequency_penalty = 0.5;
  std::vector<int64_t> prompt(1000);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int64_t((i * 7919) % kVocab);
  RequestSampler sampler(p, 1, prompt);
  const std::vector<float>& row = logits(0);
  int64_t made = 0;
  for (auto _ : state) {
    // A fresh request every 1,024 tokens (GPT-2's context): the penalised set stays realistic.
    if (++made % 1024 == 0) sampler = RequestSampler(p, uint64_t(made), prompt);
    benchmark::DoNotOptimize(sampler.sample(row));
  }
  state.SetLabel("zipf");
}
BENCHMARK(BM_RequestSamplerPenalties)->Unit(benchmark::kMicrosecond);

// The peer: tessel generate's sampler, top-p by sorting the whole vocabulary.
void BM_GenerateSampler(benchmark::State& state) {
  models::SamplingOptions o;
  o.top_p = double(state.range(1)) / 100;
  models::Sampler sampler(o);
  const std::vector<float>& row = logits(int(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(row));
  state.SetLabel(state.range(0) == 0 ? "zipf" : "normal");
}
BENCHMARK(BM_GenerateSampler)
    ->ArgNames({"shape", "top_p"})
    ->Args({0, 90})
    ->Args({1, 90})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessel::serve

BENCHMARK_MAIN();
