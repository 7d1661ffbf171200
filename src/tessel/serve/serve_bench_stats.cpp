// SPDX-License-Identifier: Apache-2.0
// Percentiles (linear interpolation, type 7), summaries and fixed-bound histograms for
// `tessel bench serve`.
#include "tessel/serve/serve_bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessel/core/error.h"

namespace tessel::serve {

double percentile(std::vector<double> samples, double p) {
  TESSEL_CHECK(!samples.empty(), "percentile: no samples");
  TESSEL_CHECK(p >= 0.0 && p <= 100.0, "percentile: p = ", p, " is outside [0, 100]");
  std::sort(samples.begin(), samples.end());
  // Position h = (n - 1) p / 100 between order statistics floor(h) and floor(h) + 1.
  const double h = double(samples.size() - 1) * p / 100.0;
  const size_t lo = size_t(std::floor(h));
  if (lo + 1 >= samples.size()) return samples.back();
  const double frac = h - double(lo);
  return samples[lo] + frac * (samples[lo + 1] - samples[lo]);
}

Summary summarize(const std::vector<double>& samples) {
  Summary s;
  if (samples.empty()) return s;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  s.count = int64_t(sorted.size());
  s.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / double(sorted.size());
  s.min = sorted.front();
  s.max = sorted.back();
  s.p50 = percentile(sorted, 50);
  s.p90 = percentile(sorted, 90);
  s.p99 = percentile(sorted, 99);
  return s;
}

LatencyHistogram::LatencyHistogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  TESSEL_CHECK(!bounds_.empty(), "LatencyHistogram: no bucket bounds");
  for (size_t i = 1; i < bounds_.size(); ++i) {
    TESSEL_CHECK(bounds_[i] > bounds_[i - 1], "LatencyHistogram: bounds must increase, but bound ",
                 i, " = ", bounds_[i], " follows ", bounds_[i - 1]);
  }
  counts_.assign(bounds_.size() + 1, 0);
}

LatencyHistogram LatencyHistogram::latency_seconds() {
  std::vector<double> b;
  for (double decade = 1e-3; decade < 50; decade *= 10) {
    for (double m : {1.0, 2.5, 5.0}) b.push_back(m * decade);
  }
  b.push_back(60.0);
  return LatencyHistogram(b);
}

void LatencyHistogram::add(double value) {
  // The first bound >= value: (bounds[i-1], bounds[i]] holds it.
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++counts_[size_t(it - bounds_.begin())];
  ++total_;
}

}  // namespace tessel::serve
