// SPDX-License-Identifier: Apache-2.0
// Greedy, temperature, top-k and top-p (nucleus) sampling over one row of logits.
#include "tessel/models/sampling.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/error.h"

namespace tessel::models {

void SamplingOptions::validate() const {
  TESSEL_CHECK(std::isfinite(temperature) && temperature >= 0, "sampling: temperature ",
               temperature, " must be >= 0 (0 = greedy)");
  TESSEL_CHECK(top_k >= 0, "sampling: top-k ", top_k, " must be >= 0 (0 = no limit)");
  TESSEL_CHECK(top_p > 0 && top_p <= 1, "sampling: top-p ", top_p, " must be in (0, 1]");
}

int64_t argmax(std::span<const float> logits) {
  TESSEL_CHECK(!logits.empty(), "argmax: empty logits");
  int64_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[size_t(best)]) best = int64_t(i);
  }
  return best;
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), generator_(options.seed) {
  options_.validate();
}

std::vector<std::pair<int64_t, double>> Sampler::distribution(std::span<const float> logits) const {
  TESSEL_CHECK(!logits.empty(), "sampling: empty logits");
  if (options_.greedy()) return {{argmax(logits), 1.0}};
  const int64_t n = int64_t(logits.size());
  for (int64_t i = 0; i < n; ++i) {
    TESSEL_CHECK(!std::isnan(logits[size_t(i)]), "sampling: logit ", i, " is NaN");
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  auto before = [&](int64_t a, int64_t b) {
    const float la = logits[size_t(a)], lb = logits[size_t(b)];
    return la > lb || (la == lb && a < b);
  };
  // Only the k best need sorting; without top-k the whole vocabulary is ordered (top-p needs it).
  const int64_t k = options_.top_k > 0 ? std::min(options_.top_k, n) : n;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
  order.resize(size_t(k));
  // Softmax of logits / temperature over the candidates, in double.
  const double inv_t = 1.0 / options_.temperature, top = double(logits[size_t(order[0])]);
  std::vector<std::pair<int64_t, double>> out;
  out.reserve(order.size());
  double total = 0;
  for (int64_t id : order) {
    const double w = std::exp((double(logits[size_t(id)]) - top) * inv_t);
    out.emplace_back(id, w);
    total += w;
  }
  // Nucleus: the shortest most-likely-first prefix whose mass reaches top_p (at least one token).
  if (options_.top_p < 1.0) {
    double mass = 0;
    size_t keep = 0;
    while (keep < out.size()) {
      mass += out[keep++].second / total;
      if (mass >= options_.top_p) break;
    }
    out.resize(keep);
    total = 0;
    for (const auto& [id, w] : out) total += w;
  }
  for (auto& [id, w] : out) w /= total;
  return out;
}

int64_t Sampler::sample(std::span<const float> logits) {
  const auto dist = distribution(logits);
  const double u = double(uniform_at(generator_.seed(), generator_.reserve(1), 0));
  double acc = 0;
  for (const auto& [id, p] : dist) {
    acc += p;
    if (u < acc) return id;
  }
  return dist.back().first;  // u within rounding of 1
}

}  // namespace tessel::models
