// SPDX-License-Identifier: Apache-2.0
// RequestSampler: penalties, temperature, top-k / top-p / min-p and the draw over one row of
// logits, in double. Nothing sorts the vocabulary: top-k keeps a heap of k (a partial sort), top-p
// buckets the ids by log-weight in one pass and sorts only the bucket the nucleus ends in, and
// the draw scans the surviving candidates in the order the filters left them (fixed by the logits
// alone, so a seed still replays).
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
// Top-p's buckets: ids grouped by -log(weight) in steps of 1/32 nat, 128 nats deep (weights
// below e^-128 share the last bucket).
constexpr int kBucketsPerNat = 32;
constexpr int kBuckets = 128 * kBucketsPerNat;

// Most likely first: the higher logit, then the lower id (a strict total order, so the k best
// and the nucleus are single, well-defined sets even with ties).
struct Before {
  const double* l;
  bool operator()(int32_t a, int32_t b) const { return l[a] > l[b] || (l[a] == l[b] && a < b); }
};

// A uniform double in [0, 1) with 53 random bits from the counter's first two words: a float's
// 24 bits could never draw a token less likely than 2^-24.
double draw_unit(uint64_t seed, uint64_t counter) {
  const auto r = philox4x32(counter, kSampleStream, seed);
  const uint64_t bits = (uint64_t(r[0]) << 21) ^ (uint64_t(r[1]) >> 11);
  return double(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace

struct RequestSampler::Scratch {
  std::vector<double> logits;       // penalised, one per allowed id
  std::vector<double> weight;       // exp((logit - max) / temperature)
  std::vector<int32_t> order;       // candidate ids
  std::vector<uint16_t> bucket;     // top-p: each id's bucket
  std::vector<double> bucket_mass;  // top-p: each bucket's weight
  std::vector<int32_t> edge;        // top-p: the ids of the bucket the nucleus ends in
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

namespace {

// The first id holding the largest of l[0, n) (the logits as they came, or penalised); NaN and
// +inf would poison the softmax and are refused, naming the id and its logit as it came (`raw`).
// Two vectorised passes (whether any is bad, the largest value), then the first id holding it.
template <typename T>
int64_t first_max(const T* l, int64_t n, std::span<const float> raw) {
  constexpr T kInf = std::numeric_limits<T>::infinity();
  int bad = 0;
  T top = -kInf;
#pragma omp simd reduction(| : bad) reduction(max : top)
  for (int64_t i = 0; i < n; ++i) {
    bad |= int(!(l[i] < kInf));  // NaN or +inf
    top = l[i] > top ? l[i] : top;
  }
  if (bad) {
    for (int64_t i = 0; i < n; ++i) {
      TESSEL_CHECK(!std::isnan(l[i]) && l[i] != kInf, "sampler: logit ", i, " is ", raw[size_t(i)],
                   " (NaN and +inf cannot be sampled)");
    }
  }
  int64_t best = 0;
  while (l[best] != top) ++best;
  TESSEL_CHECK(std::isfinite(l[best]), "sampler: every allowed logit is -inf");
  return best;
}

}  // namespace

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
  return first_max(l, n, logits);
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

int64_t RequestSampler::nucleus(Scratch& s, double max_logit, double target) const {
  // Bucket b holds the ids with -log(weight) in [b, b + 1) / kBucketsPerNat, so every id of a
  // bucket is more likely than every id of a later one. One pass weighs the buckets; the nucleus
  // is then every bucket before the one where the mass crosses target, plus the most likely ids
  // of that one, which alone is sorted.
  const int64_t n = int64_t(s.logits.size());
  const double* l = s.logits.data();
  const double* w = s.weight.data();
  const double scale = kBucketsPerNat / params_.temperature;
  s.bucket.resize(size_t(n));
  s.bucket_mass.assign(kBuckets, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double d = (max_logit - l[i]) * scale;  // >= 0; +inf for a -inf logit
    const uint16_t b = d < kBuckets - 1 ? uint16_t(d) : uint16_t(kBuckets - 1);
    s.bucket[size_t(i)] = b;
    s.bucket_mass[b] += w[i];
  }
  double above = 0;
  int edge = 0;
  while (edge < kBuckets - 1 && above + s.bucket_mass[size_t(edge)] < target) {
    above += s.bucket_mass[size_t(edge++)];
  }
  int32_t* ids = s.order.data();
  int64_t count = 0;
  s.edge.clear();
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t b = s.bucket[size_t(i)];
    if (b < edge) {
      ids[count++] = int32_t(i);
    } else if (b == edge) {
      s.edge.push_back(int32_t(i));
    }
  }
  std::sort(s.edge.begin(), s.edge.end(), Before{l});
  for (int32_t id : s.edge) {
    ids[count++] = id;
    above += w[id];
    if (above >= target) break;
  }
  return count;
}

int64_t RequestSampler::filter(Scratch& s, double max_logit, bool weighed, double& total) const {
  const int64_t n = int64_t(s.logits.size());
  s.order.resize(size_t(n));
  std::iota(s.order.begin(), s.order.end(), 0);
  const Before before{s.logits.data()};
  int32_t* ids = s.order.data();
  int64_t count = n;
  const bool top_k = params_.top_k > 0 && params_.top_k < n;
  if (top_k) {
    // A heap of the k best in one pass, then sorted: most likely first.
    count = params_.top_k;
    std::partial_sort(ids, ids + count, ids + n, before);
  }
  if (!weighed) {
    // Only the candidates' weights are ever read: after top-k, k exponentials instead of n.
    s.weight.resize(size_t(n));
    const double inv_t = 1.0 / params_.temperature;
    for (int64_t i = 0; i < count; ++i) {
      s.weight[size_t(ids[i])] = std::exp((s.logits[size_t(ids[i])] - max_logit) * inv_t);
    }
  }
  const double* w = s.weight.data();
  auto sum = [&] {
    double t = 0;
    for (int64_t i = 0; i < count; ++i) t += w[ids[i]];
    return t;
  };
  total = sum();
  if (params_.top_p < 1.0) {
    // Nucleus: the fewest most likely candidates whose mass reaches top_p.
    const double target = params_.top_p * total;
    if (top_k) {
      double mass = 0;
      int64_t keep = 0;
      while (keep < count && mass < target) mass += w[ids[keep++]];
      count = keep;
    } else {
      count = nucleus(s, max_logit, target);
    }
    total = sum();
  }
  if (params_.min_p > 0.0) {
    // The most likely candidate has weight exp(0) = 1 and every filter keeps it, so the bar is
    // min_p itself.
    const double bar = params_.min_p;
    count = std::remove_if(ids, ids + count, [&](int32_t id) { return w[id] < bar; }) - ids;
    total = sum();
  }
  return count;
}

std::vector<std::pair<int64_t, double>> RequestSampler::distribution(
    std::span<const float> logits) const {
  Scratch& s = scratch();
  const int64_t best = penalise(logits, s);
  if (params_.greedy()) return {{best, 1.0}};
  double total = 0;
  const int64_t count = filter(s, s.logits[size_t(best)], false, total);
  std::sort(s.order.begin(), s.order.begin() + count, Before{s.logits.data()});
  std::vector<std::pair<int64_t, double>> out;
  out.reserve(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    const int32_t id = s.order[size_t(i)];
    out.emplace_back(id, s.weight[size_t(id)] / total);
  }
  return out;
}

SampledToken RequestSampler::sample(std::span<const float> logits) {
  if (params_.greedy() && !params_.logprobs && seen_.empty() && counts_.empty()) {
    // Only the first maximum is wanted and nothing is penalised: found in the floats themselves,
    // without penalise's widened copy (the same id: widening is exact; docs/BENCHMARKS.md, "The
    // greedy sampler's copy").
    SampledToken out;
    out.token = first_max(logits.data(), limit_for(logits), logits);
    generator_.reserve(1);  // the stream's position stays the token's index
    record(out.token);
    return out;
  }
  Scratch& s = scratch();
  const int64_t best = penalise(logits, s);
  const double max_logit = s.logits[size_t(best)];
  // One counter per token, drawn or not: the stream's position is the token's index.
  const double u = draw_unit(generator_.seed(), generator_.reserve(1));
  const bool greedy = params_.greedy();
  // Logprobs need every weight, at the temperature they are reported at (1 for greedy); sampling
  // reuses them. Otherwise filter() computes the candidates' weights alone.
  const double t = params_.temperature == 0.0 ? 1.0 : params_.temperature;
  const double all = params_.logprobs ? weigh(s, t, max_logit) : 0.0;
  SampledToken out;
  if (greedy) {
    out.token = best;
  } else {
    double total = 0;
    const int64_t count = filter(s, max_logit, params_.logprobs.has_value(), total);
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
      s.order.resize(size_t(n));
      std::iota(s.order.begin(), s.order.end(), 0);
      std::partial_sort(s.order.begin(), s.order.begin() + top, s.order.end(),
                        Before{s.logits.data()});
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
