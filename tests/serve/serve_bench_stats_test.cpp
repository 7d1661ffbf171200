// SPDX-License-Identifier: Apache-2.0
// Percentiles (linear interpolation between order statistics), summaries and histograms of
// `tessel bench serve`, on samples whose answers follow from the definition by hand.
#include "tessel/serve/serve_bench_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "common/error_text.h"

namespace tessel::serve {
namespace {

using test::expect_error;
constexpr double kTol = 1e-12;  // interpolation rounds in the last bits

TEST(ServeBenchStats, PercentilesOfFiveUnorderedSamples) {
  const std::vector<double> s = {5, 1, 4, 2, 3};
  // h = (n - 1) p / 100 = 4 p / 100.
  EXPECT_DOUBLE_EQ(percentile(s, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(s, 50), 3.0);    // h = 2
  EXPECT_NEAR(percentile(s, 90), 4.6, kTol);   // h = 3.6: 4 + 0.6 (5 - 4)
  EXPECT_NEAR(percentile(s, 99), 4.96, kTol);  // h = 3.96
  EXPECT_DOUBLE_EQ(percentile(s, 100), 5.0);
  EXPECT_DOUBLE_EQ(percentile(s, 12.5), 1.5);  // h = 0.5
}

TEST(ServeBenchStats, PercentilesOfSevenAndOfOne) {
  const std::vector<double> s = {70, 10, 60, 20, 50, 30, 40};
  EXPECT_DOUBLE_EQ(percentile(s, 50), 40.0);   // h = 3
  EXPECT_NEAR(percentile(s, 90), 64.0, kTol);  // h = 5.4: 60 + 0.4 x 10
  EXPECT_NEAR(percentile(s, 99), 69.4, kTol);  // h = 5.94
  EXPECT_DOUBLE_EQ(percentile({2.5}, 0), 2.5);
  EXPECT_DOUBLE_EQ(percentile({2.5}, 99), 2.5);
  EXPECT_NEAR(percentile({-1, 3}, 25), 0.0, kTol);  // h = 0.25: -1 + 0.25 x 4
}

// At p = 100 k / (n - 1) the percentile is exactly the k-th order statistic, for any samples.
TEST(ServeBenchStats, PercentileAtGridPointsIsTheOrderStatistic) {
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> u(-5, 5);
  for (size_t n : {2, 13, 33}) {
    std::vector<double> s(n);
    for (double& v : s) v = u(gen);
    std::vector<double> sorted = s;
    std::sort(sorted.begin(), sorted.end());
    for (size_t k = 0; k < n; ++k) {
      EXPECT_NEAR(percentile(s, 100.0 * double(k) / double(n - 1)), sorted[k], kTol)
          << "n " << n << " k " << k;
    }
  }
}

TEST(ServeBenchStats, RefusesNoSamplesAndOutOfRangeP) {
  expect_error([] { percentile({}, 50); }, {"no samples"});
  expect_error([] { percentile({1, 2}, 101); }, {"101", "[0, 100]"});
  expect_error([] { percentile({1, 2}, -1); }, {"-1"});
}

TEST(ServeBenchStats, SummaryOfSamples) {
  const Summary s = summarize({3, 1, 2, 10, 4});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(s.p50, 3.0);
  EXPECT_NEAR(s.p90, 7.6, kTol);   // h = 3.6: 4 + 0.6 x 6
  EXPECT_NEAR(s.p99, 9.76, kTol);  // h = 3.96
  const Summary none = summarize({});
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.p99, 0.0);
}

TEST(ServeBenchStats, HistogramBucketsIncludeTheirUpperBound) {
  LatencyHistogram h({1, 2, 3});
  for (double v : {0.5, 1.0, 1.5, 2.0, 2.0001, 3.0, 3.5, 100.0}) h.add(v);
  EXPECT_EQ(h.counts(), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(h.total(), 8);
  expect_error([] { LatencyHistogram({1, 1}); }, {"increase", "1"});
  expect_error([] { LatencyHistogram(std::vector<double>{}); }, {"no bucket bounds"});
}

TEST(ServeBenchStats, LatencyHistogramSpansMillisecondsToAMinute) {
  LatencyHistogram h = LatencyHistogram::latency_seconds();
  EXPECT_DOUBLE_EQ(h.bounds().front(), 1e-3);
  EXPECT_DOUBLE_EQ(h.bounds().back(), 60.0);
  h.add(0.0004);
  h.add(0.2);
  h.add(120);
  EXPECT_EQ(h.counts().front(), 1);
  EXPECT_EQ(h.counts().back(), 1);
  // 0.2 s lands in (0.1, 0.25].
  const auto it = std::find(h.bounds().begin(), h.bounds().end(), 0.25);
  ASSERT_NE(it, h.bounds().end());
  EXPECT_EQ(h.counts()[size_t(it - h.bounds().begin())], 1);
}

}  // namespace
}  // namespace tessel::serve
