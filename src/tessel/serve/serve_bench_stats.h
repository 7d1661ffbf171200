// SPDX-License-Identifier: Apache-2.0
// Statistics of `tessel bench serve`: percentiles of latency samples and fixed-bound histograms.
// Percentiles interpolate linearly between the two nearest order statistics (the "linear" rule of
// Hyndman and Fan 1996, type 7, which NumPy's percentile uses by default), so figures agree with
// the Python serving benchmarks people compare against.
#pragma once

#include <cstdint>
#include <vector>

namespace tessel::serve {

// The p-th percentile (p in [0, 100]) of `samples`, in any order; the samples must be non-empty.
double percentile(std::vector<double> samples, double p);

// The figures every latency is reported with. All zero (count 0) for no samples.
struct Summary {
  int64_t count = 0;
  double mean = 0, min = 0, max = 0, p50 = 0, p90 = 0, p99 = 0;
};
Summary summarize(const std::vector<double>& samples);

// Counts per bucket: bucket i holds samples in (bounds[i-1], bounds[i]] (Prometheus' `le`
// convention); one more bucket above the last bound holds the rest.
class LatencyHistogram {
 public:
  explicit LatencyHistogram(std::vector<double> bounds);  // strictly increasing, non-empty
  // Latency bounds in seconds, 1 ms to 60 s, about four per decade (1, 2.5, 5 x 10^k).
  static LatencyHistogram latency_seconds();
  void add(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<int64_t>& counts() const { return counts_; }  // bounds().size() + 1 of them
  int64_t total() const { return total_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  int64_t total_ = 0;
};

}  // namespace tessel::serve
