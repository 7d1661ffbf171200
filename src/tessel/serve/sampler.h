// SPDX-License-Identifier: Apache-2.0
// Per-request sampling for the serving engine: one RequestSampler per choice turns each row of
// logits into the next token under that request's SamplingParams (request.h): repetition penalty
// (CTRL, Keskar et al. 2019), OpenAI's presence and frequency penalties, temperature, top-k,
// top-p (nucleus sampling, Holtzman et al. 2020) and min-p (Nguyen et al. 2024), with the
// log-probabilities vLLM reports. Draws come from the request's own counter-based generator
// (Philox, core/rng.h) and use exactly one counter per token, greedy or not, so a seeded request
// replays identically whatever else shares its batch.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tessel/core/rng.h"
#include "tessel/serve/request.h"

namespace tessel::serve {

// The token drawn, its log-probability and the top alternatives (most likely first, ties: lower id
// first). logprob and top are filled only when the request asked for logprobs.
using SampledToken = TokenLogprob;

class RequestSampler {
 public:
  // params are validated (Error naming the bad one). vocab_limit: ids >= it are never drawn and
  // are left out of the log-probabilities (a padded lm_head); 0 = every entry of the logits row.
  // prompt: the ids the repetition penalty starts from.
  RequestSampler(const SamplingParams& params, uint64_t seed, std::span<const int64_t> prompt,
                 int64_t vocab_limit = 0);

  // Draws the next token from one row of logits (NaN or +inf is an Error), records it for the
  // penalties and advances the generator by one counter.
  SampledToken sample(std::span<const float> logits);

  // The candidates sample() would draw from for this row with the tokens recorded so far, and
  // their renormalised probabilities, most likely first (ties: lower id first). Greedy: the argmax
  // alone. Draws nothing, records nothing (for tests and diagnostics).
  std::vector<std::pair<int64_t, double>> distribution(std::span<const float> logits) const;

  // Records a token as generated without drawing it (a token the engine forced, or the replay of
  // a preempted sequence's output into a fresh sampler).
  void record(int64_t token);

  const SamplingParams& params() const { return params_; }
  const Generator& generator() const { return generator_; }
  int64_t generated() const { return generated_; }

 private:
  struct Scratch;
  // Buffers of vocabulary size, one set per thread (not per request): a batch of many requests
  // holds no vocabulary-sized memory of its own.
  static Scratch& scratch();
  int64_t limit_for(std::span<const float> logits) const;
  // The penalised logits of the allowed ids into scratch.logits; returns the first maximum's id.
  int64_t penalise(std::span<const float> logits, Scratch& s) const;
  // scratch.weight = exp((logit - max) / temperature); returns their sum.
  double weigh(Scratch& s, double temperature, double max_logit) const;
  // The candidates left by top-k, top-p and min-p into scratch.order[0, count) (in no particular
  // order, but always the same one for the same logits); returns count and sets their total
  // weight. weighed: scratch.weight already holds every weight at the request's temperature;
  // otherwise only the candidates' are computed.
  int64_t filter(Scratch& s, double max_logit, bool weighed, double& total) const;
  // Top-p over every allowed id: the nucleus (mass >= target) into scratch.order; returns its size.
  int64_t nucleus(Scratch& s, double max_logit, double target) const;

  SamplingParams params_;
  Generator generator_;
  int64_t vocab_limit_;
  int64_t generated_ = 0;
  // Ids seen in the prompt or the output (repetition penalty), and per generated id its count
  // (presence and frequency penalties). Sparse: both grow with the sequence, not the vocabulary.
  std::unordered_set<int64_t> seen_;
  std::unordered_map<int64_t, int64_t> counts_;
};

}  // namespace tessel::serve
