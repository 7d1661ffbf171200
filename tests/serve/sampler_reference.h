// SPDX-License-Identifier: Apache-2.0
// A plain fp64 model of per-request sampling for the sampler tests, written independently of
// RequestSampler: penalties on a copy of the logits, a full softmax, a full sort, then top-k,
// top-p and min-p, each renormalising what is left (the definitions in serve/request.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "tessel/serve/request.h"

namespace tessel::serve::testing {

// Penalised logits: CTRL's repetition penalty over prompt and generated ids, then OpenAI's
// presence and frequency penalties over the generated ids.
inline std::vector<double> penalised(const std::vector<float>& logits,
                                     const std::vector<int64_t>& prompt,
                                     const std::vector<int64_t>& generated,
                                     const SamplingParams& p) {
  std::vector<double> l(logits.begin(), logits.end());
  std::set<int64_t> seen(prompt.begin(), prompt.end());
  seen.insert(generated.begin(), generated.end());
  for (int64_t id : seen) {
    double& x = l[size_t(id)];
    x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
  }
  std::map<int64_t, int64_t> count;
  for (int64_t id : generated) ++count[id];
  for (const auto& [id, c] : count) {
    l[size_t(id)] -= double(c) * p.frequency_penalty + p.presence_penalty;
  }
  return l;
}

// log softmax(l / T) (T = 1 for greedy's temperature 0).
inline std::vector<double> log_softmax(const std::vector<double>& l, double temperature) {
  const double t = temperature == 0 ? 1.0 : temperature;
  const double top = *std::max_element(l.begin(), l.end());
  double sum = 0;
  for (double x : l) sum += std::exp((x - top) / t);
  std::vector<double> out;
  for (double x : l) out.push_back((x - top) / t - std::log(sum));
  return out;
}

// The distribution sampling draws from, most likely first (ties: lower id first).
inline std::vector<std::pair<int64_t, double>> distribution(const std::vector<double>& l,
                                                            const SamplingParams& p) {
  std::vector<int64_t> ids(l.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int64_t a, int64_t b) { return l[size_t(a)] > l[size_t(b)]; });
  if (p.greedy()) return {{ids[0], 1.0}};
  const std::vector<double> lp = log_softmax(l, p.temperature);
  std::vector<std::pair<int64_t, double>> d;
  for (int64_t id : ids) d.emplace_back(id, std::exp(lp[size_t(id)]));
  auto normalise = [&] {
    double s = 0;
    for (const auto& e : d) s += e.second;
    for (auto& e : d) e.second /= s;
  };
  if (p.top_k > 0 && size_t(p.top_k) < d.size()) d.resize(size_t(p.top_k));
  normalise();
  if (p.top_p < 1) {
    double cum = 0;
    size_t keep = 0;
    while (keep < d.size() && cum < p.top_p) cum += d[keep++].second;
    d.resize(keep);
    normalise();
  }
  if (p.min_p > 0) {
    const double bar = p.min_p * d[0].second;
    d.erase(std::remove_if(d.begin(), d.end(), [&](const auto& e) { return e.second < bar; }),
            d.end());
    normalise();
  }
  return d;
}

// Logits with a spread like a language model's: N(0, scale^2), fixed by the seed.
inline std::vector<float> random_logits(size_t n, uint64_t seed, double scale = 2.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> out(n);
  for (float& x : out) x = float(normal(rng));
  return out;
}

}  // namespace tessel::serve::testing
