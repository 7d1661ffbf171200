// SPDX-License-Identifier: Apache-2.0
// The seeded workload of `tessel bench serve`: length distributions, prompts of random ids or from
// a dataset, request i independent of the order requests are made in, Poisson arrivals.
#include "tessel/serve/serve_bench_workload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "common/error_text.h"

namespace tessel::serve {
namespace {

using test::expect_error;

WorkloadSpec spec(const std::string& prompt, const std::string& output, uint64_t seed = 1) {
  WorkloadSpec s;
  s.seed = seed;
  s.prompt_tokens = LengthDistribution::parse(prompt, "--prompt-tokens");
  s.output_tokens = LengthDistribution::parse(output, "--output-tokens");
  s.vocab_size = 97;
  s.first_id = 3;
  return s;
}

TEST(ServeBenchWorkload, LengthDistributionsParseAndStayInRange) {
  BenchRng rng(3);
  const LengthDistribution fixed = LengthDistribution::parse("128", "--output-tokens");
  EXPECT_EQ(fixed.sample(rng), 128);
  EXPECT_EQ(fixed.max(), 128);
  EXPECT_EQ(fixed.describe(), "128");
  const LengthDistribution u = LengthDistribution::parse("uniform:7:13", "--prompt-tokens");
  EXPECT_EQ(u.describe(), "uniform:7:13");
  EXPECT_EQ(u.max(), 13);
  std::map<int64_t, int> seen;
  for (int i = 0; i < 7000; ++i) ++seen[u.sample(rng)];
  EXPECT_EQ(seen.size(), 7u);  // every length 7..13 occurs, none outside
  EXPECT_EQ(seen.begin()->first, 7);
  EXPECT_EQ(seen.rbegin()->first, 13);
  for (const auto& [len, n] : seen) EXPECT_GT(n, 800) << len;  // about 1000 each
  const LengthDistribution nd = LengthDistribution::parse("normal:100:10", "--prompt-tokens");
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double v = double(nd.sample(rng));
    sum += v;
    sq += v * v;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 100.0, 0.5);  // 5 standard errors
  EXPECT_NEAR(sd, 10.0, 0.5);
  EXPECT_EQ(LengthDistribution::parse("normal:1:50", "x").max(), 301);
  for (int i = 0; i < 100; ++i)
    EXPECT_GE(LengthDistribution::parse("normal:1:50", "x").sample(rng), 1);
}

TEST(ServeBenchWorkload, BadLengthsAreRefusedByName) {
  expect_error([] { LengthDistribution::parse("0", "--output-tokens"); },
               {"--output-tokens", "at least 1"});
  expect_error([] { LengthDistribution::parse("uniform:9:3", "--prompt-tokens"); },
               {"--prompt-tokens", "A = 9", "B = 3"});
  expect_error([] { LengthDistribution::parse("zipf:1:2", "--prompt-tokens"); },
               {"zipf:1:2", "uniform:A:B"});
  expect_error([] { LengthDistribution::parse("12x", "--prompt-tokens"); }, {"12x"});
  expect_error([] { LengthDistribution::parse("uniform:1.5:3", "--prompt-tokens"); },
               {"whole numbers"});
  expect_error([] { LengthDistribution::parse("normal:10:-1", "--prompt-tokens"); },
               {"negative SD"});
}

TEST(ServeBenchWorkload, RequestIDependsOnlyOnSeedAndI) {
  const Workload w(spec("uniform:5:33", "uniform:1:64"));
  std::vector<BenchRequest> forward, backward(50);
  for (int64_t i = 0; i < 50; ++i) forward.push_back(w.request(i));
  for (int64_t i = 49; i >= 0; --i) backward[size_t(i)] = w.request(i);
  std::set<size_t> prompt_lengths;
  for (size_t i = 0; i < 50; ++i) {
    EXPECT_EQ(forward[i].prompt_ids, backward[i].prompt_ids);
    EXPECT_EQ(forward[i].max_tokens, backward[i].max_tokens);
    EXPECT_EQ(forward[i].index, int64_t(i));
    EXPECT_GE(forward[i].prompt_ids.size(), 5u);
    EXPECT_LE(forward[i].prompt_ids.size(), 33u);
    EXPECT_GE(forward[i].max_tokens, 1);
    EXPECT_LE(forward[i].max_tokens, 64);
    for (int64_t id : forward[i].prompt_ids) {
      EXPECT_GE(id, 3);
      EXPECT_LT(id, 97);
    }
    prompt_lengths.insert(forward[i].prompt_ids.size());
  }
  EXPECT_GT(prompt_lengths.size(), 10u);  // lengths vary between requests
  EXPECT_NE(forward[0].prompt_ids, forward[1].prompt_ids);
  // Another seed, another workload; the same seed in a new Workload, the same one.
  EXPECT_NE(Workload(spec("uniform:5:33", "uniform:1:64", 2)).request(0).prompt_ids,
            forward[0].prompt_ids);
  EXPECT_EQ(Workload(spec("uniform:5:33", "uniform:1:64")).request(17).prompt_ids,
            forward[17].prompt_ids);
}

TEST(ServeBenchWorkload, SharedPrefixOpensEveryPromptThenTheRequestsOwnIds) {
  WorkloadSpec s = spec("uniform:5:13", "7");
  s.shared_prefix_tokens = 33;
  const Workload w(s);
  const WorkloadSpec plain_spec = spec("uniform:5:13", "7");
  const Workload plain(plain_spec);
  const std::vector<int64_t> first = w.request(0).prompt_ids;
  const std::vector<int64_t> prefix(first.begin(), first.begin() + 33);
  EXPECT_GT(std::set<int64_t>(prefix.begin(), prefix.end()).size(), 10u);
  for (int64_t i = 0; i < 20; ++i) {
    const std::vector<int64_t> ids = w.request(i).prompt_ids;
    // The request's own part is what the same workload without the prefix gives.
    EXPECT_EQ(std::vector<int64_t>(ids.begin() + 33, ids.end()), plain.request(i).prompt_ids);
    EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 33), prefix);
    for (int64_t id : ids) {
      EXPECT_GE(id, 3);
      EXPECT_LT(id, 97);
    }
  }
  s.seed = 2;
  const std::vector<int64_t> other = Workload(s).request(0).prompt_ids;
  EXPECT_NE(std::vector<int64_t>(other.begin(), other.begin() + 33), prefix);
  s.dataset = {"a line"};
  expect_error([&] { Workload bad(s); }, {"--shared-prefix-tokens", "--dataset"});
  s.dataset.clear();
  s.shared_prefix_tokens = -1;
  expect_error([&] { Workload bad(s); }, {"--shared-prefix-tokens -1", ">= 0"});
}

TEST(ServeBenchWorkload, DatasetsSplitByFortuneEntriesOrLines) {
  const std::string fortunes =
      "A bird in the hand\nis worth two.  \n%\nSecond saying.\n%\n%\n\nThird,\n\nwith a gap.\n%\n";
  EXPECT_EQ(split_dataset(fortunes),
            (std::vector<std::string>{"A bird in the hand\nis worth two.", "Second saying.",
                                      "Third,\n\nwith a gap."}));
  EXPECT_EQ(split_dataset("one\n\n  \ntwo  \r\nthree"),
            (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_TRUE(split_dataset("\n\n").empty());
}

TEST(ServeBenchWorkload, DatasetEntriesAreEachUsedOnceBeforeRepeating) {
  WorkloadSpec s = spec("1", "8");
  for (int i = 0; i < 13; ++i) s.dataset.push_back("entry " + std::to_string(i));
  const Workload w(s);
  std::set<std::string> first_cycle;
  for (int64_t i = 0; i < 13; ++i) {
    const BenchRequest r = w.request(i);
    EXPECT_TRUE(r.prompt_ids.empty());
    EXPECT_EQ(r.max_tokens, 8);
    first_cycle.insert(r.prompt_text);
    EXPECT_EQ(w.request(i + 13).prompt_text, r.prompt_text);  // the next cycle repeats the order
  }
  EXPECT_EQ(first_cycle.size(), 13u);
  // The order is shuffled by the seed, not the file's.
  bool shuffled = false;
  for (int64_t i = 0; i < 13; ++i)
    shuffled = shuffled || w.request(i).prompt_text != s.dataset[size_t(i)];
  EXPECT_TRUE(shuffled);
}

TEST(ServeBenchWorkload, PoissonArrivalsHaveExponentialGaps) {
  PoissonArrivals a(4.0, 11), same(4.0, 11);
  EXPECT_EQ(a.next(), 0.0);
  EXPECT_EQ(same.next(), 0.0);
  const int n = 20000;
  double last = 0, sum = 0, sq = 0;
  int64_t under_mean = 0;
  for (int i = 0; i < n; ++i) {
    const double t = a.next();
    EXPECT_EQ(t, same.next());
    const double gap = t - last;
    ASSERT_GT(gap, 0.0);
    sum += gap;
    sq += gap * gap;
    under_mean += gap < 0.25;
    last = t;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.25, 0.25 * 0.04);  // 5.6 standard errors of the mean
  EXPECT_NEAR(sd, 0.25, 0.25 * 0.06);    // an exponential's SD equals its mean
  // P(gap < mean) = 1 - 1/e for an exponential.
  EXPECT_NEAR(double(under_mean) / n, 1.0 - std::exp(-1.0), 0.02);
  expect_error([] { PoissonArrivals(0.0, 1); }, {"--rate", "0"});
}

TEST(ServeBenchWorkload, UniformIntCoversSmallAndFullRanges) {
  BenchRng rng(5);
  std::set<int64_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(rng.uniform_int(-2, 2));
  EXPECT_EQ(seen, (std::set<int64_t>{-2, -1, 0, 1, 2}));
  EXPECT_EQ(rng.uniform_int(9, 9), 9);
  expect_error([&] { rng.uniform_int(3, 2); }, {"empty range"});
  const double u = rng.uniform();
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

}  // namespace
}  // namespace tessel::serve
