// SPDX-License-Identifier: Apache-2.0
// RequestSampler: penalties, temperature, top-k / top-p / min-p and the draw over one row of
// logits, in double. Sorting is only as deep as the filters need: top-k sorts k entries, top-p
// sorts growing prefixes until the nucleus is complete, and with neither the draw scans the
// weights in id order without sorting at all.
#include "tessel/serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tessel/core/error.h"

namespace tessel::serve {

namespace {

// Philox counter_hi of the sampling stream (uniform_at uses 0, normal_at 1), so a request's draws
// never coincide with other uses of the same seed.
constexpr uint64_t kSampleStream = 2;
// The first prefix top-p sorts; it grows by kGrowth until the nucleus fits.
constexpr int64_t kFirstPrefix = 64;
constexpr int64_t kGrowth = 4;

// A uniform double in [0, 1) with 53 random bits from the counter's first two words: a float's
// 24 bits could never draw a token less likely than 2^-24.
double draw_unit(uint64_t seed, uint64_t counter) {
  const auto r = philox4x32(counter, kSampleStream, seed);
  const uint64_t bits = (uint64_t(r[0]) << 21) ^ (uint64_t(r[1]) >> 11);
  return double(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace

struct RequestSampler::Scratch {
  std::vector<double> logits;  // penalised, one per allowed id
  std::vector<double> weight;  // exp((logit - max) / temperature)
  std::vector<int32_t> order;  // candidate ids
};

RequestSampler::Scratch& RequestSampler::scratch() {
  thread_local Scratch s;
  return s;
}

RequestSampler::RequestSampler(const SamplingParams& params, uint64_t seed,
                               std::span<const int64_t> prompt, int64_t vocab_limit)
    : params_(params), generator_(seed), vocab_limit_(vocab_limit) {
  params_.validate();
  TESSEL_CHECK(vocab_limit >= 0 && vocab_limit <= std::numeric_limits<int32_t>::max(),
               "sampler: vocab_limit ", vocab_limit, " must be in [0, 2^31)");
  if (params_.repetition_penalty != 1.0) seen_.insert(prompt.begin(), prompt.end());
}

void RequestSampler::record(int64_t token) {
  TESSEL_CHECK(token >= 0, "sampler: recorded token ", token, " is negative");
  if (params_.repetition_penalty != 1.0) seen_.insert(token);
  if (params_.presence_penalty != 0.0 || params_.frequency_penalty != 0.0) ++counts_[token];
  ++generated_;
}

int64_t RequestSampler::limit_for(std::span<const float> logits) const {
  const int64_t n = int64_t(logits.size());
  TESSEL_CHECK(n > 0, "sampler: empty logits");
  TESSEL_CHECK(vocab_limit_ <= n, "sampler: vocab_limit ", vocab_limit_, " exceeds the ", n,
               " logits");
  return vocab_limit_ > 0 ? vocab_limit_ : n;
}

int64_t RequestSampler::penalise(std::span<const float> logits, Scratch& s) const {
  const int64_t n = limit_for(logits);
  s.logits.resize(size_t(n));
  double* l = s.logits.data();
  for (int64_t i = 0; i < n; ++i) l[i] = double(logits[size_t(i)]);
  const double rep = params_.repetition_penalty;
  for (int64_t id : seen_) {
    if (id >= n) continue;
    l[id] = l[id] > 0 ? l[id] / rep : l[id] * rep;
  }
  for (const auto& [id, count] : counts_) {
    if (id >= n) continue;
    l[id] -= double(count) * params_.frequency_penalty + params_.presence_penalty;
  }
  // One pass finds the first maximum and rejects what would poison the softmax.
  int64_t best = 0;
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    bad |= std::isnan(l[i]) || l[i] == std::numeric_limits<double>::infinity();
    if (l[i] > l[best]) best = i;
  }
  if (bad) {
    for (int64_t i = 0; i < n; ++i) {
      TESSEL_CHECK(!std::isnan(l[i]) && l[i] != std::numeric_limits<double>::infinity(),
                   "sampler: logit ", i, " is ", logits[size_t(i)],
                   " (NaN and +inf cannot be sampled)");
    }
  }
  TESSEL_CHECK(std::isfinite(l[best]), "sampler: every allowed logit is -inf");
  return best;
}

double RequestSampler::weigh(Scratch& s, double temperature, double max_logit) const {
  const int64_t n = int64_t(s.logits.size());
  s.weight.resize(size_t(n));
  const double inv_t = 1.0 / temperature;
  const double* l = s.logits.data();
  double* w = s.weight.data();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = std::exp((l[i] - max_logit) * inv_t);
    total += w[i];
  }
  return total;
}

int64_t RequestSampler::filter(Scratch& s, double& total, bool& sorted) const {
  const int64_t n = int64_t(s.logits.size());
  s.order.resize(size_t(n));
  std::iota(s.order.begin(), s.order.end(), 0);
  const double* l = s.logits.data();
  const double* w = s.weight.data();
  auto before = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  auto first = s.order.begin();
  int64_t count = n;
  sorted = false;
  if (params_.top_k > 0 && params_.top_k < n) {
    count = params_.top_k;
    std::partial_sort(first, first + count, first + n, before);
    sorted = true;
  }
  total = 0;
  for (int64_t i = 0; i < count; ++i) total += w[s.order[size_t(i)]];
  if (params_.top_p < 1.0) {
    // Nucleus: the shortest most-likely-first prefix whose mass reaches top_p. Sort a prefix, scan
    // it, and only when the mass is still short sort the next, longer stretch of the rest.
    const double target = params_.top_p * total;
    int64_t ready = sorted ? count : 0, keep = 0;
    double mass = 0;
    while (true) {
      if (keep == ready) {
        const int64_t next = std::min(count, std::max(kFirstPrefix, ready * kGrowth));
        std::partial_sort(first + ready, first + next, first + count, before);
        ready = next;
      }
      mass += w[s.order[size_t(keep++)]];
      if (mass >= target || keep == count) break;
    }
    count = keep;
    total = mass;
    sorted = true;
  }
  if (params_.min_p > 0.0) {
    // The most likely candidate has weight exp(0) = 1 (every filter keeps it), so the bar is
    // min_p itself.
    const double bar = params_.min_p;
    if (sorted) {
      int64_t keep = 1;
      while (keep < count && w[s.order[size_t(keep)]] >= bar) ++keep;
      count = keep;
    } else {
      count = std::remove_if(first, first + count, [&](int32_t id) { return w[id] < bar; }) - first;
    }
    total = 0;
    for (int64_t i = 0; i < count; ++i) total += w[s.order[size_t(i)]];
  }
  return count;
}

std::vector<std::pair<int64_t, double>> RequestSampler::distribution(
    std::span<const float> logits) const {
  Scratch& s = scratch();
  const int64_t best = penalise(logits, s);
  if (params_.greedy()) return {{best, 1.0}};
  weigh(s, params_.temperature, s.logits[size_t(best)]);
  double total = 0;
  bool sorted = false;
  const int64_t count = filter(s, total, sorted);
  const double* l = s.logits.data();
  if (!sorted) {
    std::sort(s.order.begin(), s.order.begin() + count,
              [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  }
  std::vector<std::pair<int64_t, double>> out;
  out.reserve(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    const int32_t id = s.order[size_t(i)];
    out.emplace_back(id, s.weight[size_t(id)] / total);
  }
  return out;
}

SampledToken RequestSampler::sample(std::span<const float> logits) {
  Scratch& s = scratch();
  const int64_t best = penalise(logits, s);
  const double max_logit = s.logits[size_t(best)];
  // One counter per token, drawn or not: the stream's position is the token's index.
  const double u = draw_unit(generator_.seed(), generator_.reserve(1));
  const bool greedy = params_.greedy();
  // Weights at the temperature logprobs are reported at (1 for greedy); sampling reuses them.
  const double t = params_.temperature == 0.0 ? 1.0 : params_.temperature;
  const double all = !greedy || params_.logprobs ? weigh(s, t, max_logit) : 0.0;
  SampledToken out;
  if (greedy) {
    out.token = best;
  } else {
    double total = 0;
    bool sorted = false;
    const int64_t count = filter(s, total, sorted);
    const double target = u * total;
    double acc = 0;
    out.token = -1;
    for (int64_t i = 0; i < count; ++i) {
      const int32_t id = s.order[size_t(i)];
      const double w = s.weight[size_t(id)];
      if (w == 0) continue;
      acc += w;
      out.token = id;  // stays the last possible one when u is within rounding of 1
      if (target < acc) break;
    }
  }
  if (params_.logprobs) {
    // log softmax(l / T)_i = (l_i - max) / T - log(sum_j exp((l_j - max) / T)).
    const double log_all = std::log(all);
    auto logprob = [&](int64_t id) { return (s.logits[size_t(id)] - max_logit) / t - log_all; };
    out.logprob = logprob(out.token);
    const int64_t n = int64_t(s.logits.size());
    const int64_t top = std::min(*params_.logprobs, n);
    if (top > 0) {
      const double* l = s.logits.data();
      s.order.resize(size_t(n));
      std::iota(s.order.begin(), s.order.end(), 0);
      std::partial_sort(
          s.order.begin(), s.order.begin() + top, s.order.end(),
          [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      out.top.reserve(size_t(top));
      for (int64_t i = 0; i < top; ++i) {
        out.top.emplace_back(s.order[size_t(i)], logprob(s.order[size_t(i)]));
      }
    }
  }
  record(out.token);
  return out;
}

}  // namespace tessel::serve
