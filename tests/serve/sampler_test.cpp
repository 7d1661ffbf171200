// SPDX-License-Identifier: Apache-2.0
// RequestSampler against an independent fp64 model (sampler_reference.h): each filter alone and
// combined on odd vocabularies, penalties against values worked out by hand, seeded replay and
// batch invariance, draw frequencies (chi-square), greedy and logprob ties, the vocabulary limit
// and bad input. Log-probabilities against PyTorch: sampler_torch_test.cpp.
#include "tessel/serve/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "sampler_reference.h"
#include "tessel/core/error.h"

namespace tessel::serve {
namespace {

using testing::distribution;
using testing::log_softmax;
using testing::penalised;
using testing::random_logits;

void expect_same_distribution(const std::vector<std::pair<int64_t, double>>& got,
                              const std::vector<std::pair<int64_t, double>>& want,
                              const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << what << " rank " << i;
    EXPECT_NEAR(got[i].second, want[i].second, 1e-12) << what << " rank " << i;
  }
}

struct Named {
  std::string name;
  SamplingParams params;
};

std::vector<Named> filter_cases() {
  std::vector<Named> cases;
  auto add = [&](std::string name, auto set) {
    SamplingParams p;
    set(p);
    cases.push_back({std::move(name), p});
  };
  add("plain", [](SamplingParams&) {});
  add("temperature", [](SamplingParams& p) { p.temperature = 0.6; });
  add("hot", [](SamplingParams& p) { p.temperature = 2.5; });
  add("top_k", [](SamplingParams& p) { p.top_k = 3; });
  add("top_p", [](SamplingParams& p) { p.top_p = 0.7; });
  add("min_p", [](SamplingParams& p) { p.min_p = 0.15; });
  add("combined", [](SamplingParams& p) {
    p.temperature = 1.4;
    p.top_k = 5;
    p.top_p = 0.8;
    p.min_p = 0.1;
  });
  add("top_k_beyond_vocab", [](SamplingParams& p) {
    p.top_k = 1000;
    p.top_p = 0.95;
  });
  add("greedy", [](SamplingParams& p) { p.temperature = 0; });
  add("top_k_1", [](SamplingParams& p) {
    p.top_k = 1;
    p.temperature = 0.8;
  });
  return cases;
}

TEST(RequestSampler, EachFilterAndCombinedMatchTheFp64Model) {
  for (size_t vocab : {7, 13, 33}) {
    for (const Named& c : filter_cases()) {
      for (uint64_t seed = 0; seed < 4; ++seed) {
        const auto logits = random_logits(vocab, 100 * vocab + seed);
        RequestSampler sampler(c.params, 1, {});
        const auto want = distribution(penalised(logits, {}, {}, c.params), c.params);
        expect_same_distribution(sampler.distribution(logits), want,
                                 c.name + " vocab " + std::to_string(vocab));
      }
    }
  }
}

TEST(RequestSampler, PenaltiesWithFiltersMatchTheFp64Model) {
  SamplingParams p;
  p.repetition_penalty = 1.3;
  p.presence_penalty = 0.4;
  p.frequency_penalty = 0.3;
  p.temperature = 0.9;
  p.top_p = 0.9;
  p.min_p = 0.02;
  const std::vector<int64_t> prompt = {1, 4, 4, 9, 12};
  for (size_t vocab : {13, 33}) {
    RequestSampler sampler(p, 3, prompt);
    std::vector<int64_t> generated;
    for (int step = 0; step < 12; ++step) {
      const auto logits = random_logits(vocab, 7 * step + vocab);
      const auto want = distribution(penalised(logits, prompt, generated, p), p);
      expect_same_distribution(sampler.distribution(logits), want,
                               "step " + std::to_string(step) + " vocab " + std::to_string(vocab));
      generated.push_back(sampler.sample(logits).token);
    }
  }
}

// Long nucleus: the prefix top-p sorts must grow several times before it holds the mass.
TEST(RequestSampler, NucleusOverALargeVocabularyMatchesAFullSort) {
  const auto logits = random_logits(5003, 11, 1.0);
  for (auto [k, top_p] : {std::pair<int64_t, double>{0, 0.95}, {0, 0.3}, {300, 0.5}, {0, 0.999}}) {
    SamplingParams p;
    p.top_k = k;
    p.top_p = top_p;
    RequestSampler sampler(p, 1, {});
    const auto want = distribution(penalised(logits, {}, {}, p), p);
    expect_same_distribution(sampler.distribution(logits), want,
                             "top_k " + std::to_string(k) + " top_p " + std::to_string(top_p));
  }
}

// Ties at the edge of top-k and of the nucleus: the lower ids are the more likely ones.
TEST(RequestSampler, FiltersCutThroughTiesByIdOnOddVocabularies) {
  for (size_t vocab : {7, 13, 33, 1001}) {
    std::vector<float> levels(vocab);
    for (size_t i = 0; i < vocab; ++i) levels[i] = float((i * 5) % 4) * 0.5f;
    for (auto [k, top_p, min_p] : {std::tuple<int64_t, double, double>{3, 1.0, 0.0},
                                   {0, 0.3, 0.0},
                                   {0, 0.55, 0.0},
                                   {5, 0.7, 0.0},
                                   {0, 0.8, 0.5}}) {
      SamplingParams p;
      p.top_k = k;
      p.top_p = top_p;
      p.min_p = min_p;
      RequestSampler sampler(p, 1, {});
      const auto want = distribution(penalised(levels, {}, {}, p), p);
      expect_same_distribution(sampler.distribution(levels), want,
                               "vocab " + std::to_string(vocab) + " top_k " + std::to_string(k) +
                                   " top_p " + std::to_string(top_p));
    }
  }
}

// The penalised logits, worked out by hand, recovered as log-ratios of the distribution.
TEST(RequestSampler, PenaltiesMatchHandComputedLogits) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f, 0.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.25;
  RequestSampler sampler(p, 0, std::vector<int64_t>{0, 1, 1});
  for (int64_t id : {3, 3, 5}) sampler.record(id);
  // 0, 1: prompt only, repetition penalty only (2 / 2, -1 * 2). 3: generated twice: 3 / 2 - 2 *
  // 0.5 - 0.25. 5: once: 1 / 2 - 0.5 - 0.25. The rest untouched.
  const std::vector<double> want = {1.0, -2.0, 0.5, 0.25, -2.0, -0.25, 0.0};
  std::map<int64_t, double> prob;
  for (const auto& [id, q] : sampler.distribution(logits)) prob[id] = q;
  ASSERT_EQ(prob.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(std::log(prob[int64_t(i)] / prob[6]), want[i] - want[6], 1e-12) << "id " << i;
  }
}

TEST(RequestSampler, NegativePenaltiesAndRepetitionBelowOneEncourage) {
  const std::vector<float> logits = {1.0f, -1.0f, 0.0f, 0.0f, 0.0f};
  SamplingParams p;
  p.repetition_penalty = 0.5;
  p.presence_penalty = -1.0;
  p.frequency_penalty = -0.5;
  RequestSampler sampler(p, 0, std::vector<int64_t>{1});
  sampler.record(2);
  // 0: 1. 1: prompt, -1 * 0.5. 2: 0 * 0.5 + 0.5 + 1. 3, 4: 0.
  const std::vector<double> want = {1.0, -0.5, 1.5, 0.0, 0.0};
  std::map<int64_t, double> prob;
  for (const auto& [id, q] : sampler.distribution(logits)) prob[id] = q;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(std::log(prob[int64_t(i)] / prob[3]), want[i], 1e-12) << "id " << i;
  }
}

// sample() records what it drew: a greedy request with a frequency penalty moves on.
TEST(RequestSampler, SampleRecordsTheTokenForThePenalties) {
  const std::vector<float> logits = {1.0f, 0.9f, 0.2f, -3.0f, 0.5f};
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 2.0;
  RequestSampler sampler(p, 0, {});
  EXPECT_EQ(sampler.sample(logits).token, 0);
  EXPECT_EQ(sampler.sample(logits).token, 1);  // 0 is now 1 - 2
  EXPECT_EQ(sampler.sample(logits).token, 4);  // 0.5 beats 0.2, -1 and -1.1
  EXPECT_EQ(sampler.generated(), 3);
}

TEST(RequestSampler, GreedyTakesTheFirstMaximum) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f, -1.0f, 0.0f};
  SamplingParams greedy;
  greedy.temperature = 0;
  SamplingParams top1;
  top1.top_k = 1;
  top1.temperature = 0.7;
  for (const SamplingParams& p : {greedy, top1}) {
    RequestSampler sampler(p, 5, {});
    for (int i = 0; i < 3; ++i) EXPECT_EQ(sampler.sample(logits).token, 1);
    // One counter per token even when nothing is drawn: the stream position is the token index.
    EXPECT_EQ(sampler.generator().offset(), 3u);
  }
  // With id 1 penalised (3 / 3 = 1), the first of the remaining maxima (ids 3 and 4) wins.
  SamplingParams p = greedy;
  p.repetition_penalty = 3.0;
  RequestSampler sampler(p, 0, std::vector<int64_t>{1});
  EXPECT_EQ(sampler.sample(logits).token, 3);
}

std::vector<int64_t> run(RequestSampler& sampler, size_t vocab, int steps, uint64_t logit_seed,
                         std::vector<double>* logprobs = nullptr) {
  std::vector<int64_t> tokens;
  for (int step = 0; step < steps; ++step) {
    const SampledToken t = sampler.sample(random_logits(vocab, logit_seed + uint64_t(step), 0.7));
    tokens.push_back(t.token);
    if (logprobs) logprobs->push_back(t.logprob);
  }
  return tokens;
}

TEST(RequestSampler, SameSeedReplaysDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.1;
  p.top_p = 0.95;
  p.repetition_penalty = 1.2;
  p.frequency_penalty = 0.3;
  p.logprobs = 2;
  const std::vector<int64_t> prompt = {3, 5, 8};
  RequestSampler a(p, 42, prompt), b(p, 42, prompt), c(p, 43, prompt);
  std::vector<double> la, lb;
  const auto ta = run(a, 33, 64, 1000, &la);
  EXPECT_EQ(run(b, 33, 64, 1000, &lb), ta);
  EXPECT_EQ(lb, la);
  EXPECT_NE(run(c, 33, 64, 1000), ta);
  EXPECT_EQ(a.generator().offset(), 64u);
}

// Another request's sampling between this one's tokens (other sizes, other filters, on the same
// thread's scratch buffers) changes nothing.
TEST(RequestSampler, OtherRequestsInTheBatchDoNotChangeTheDraws) {
  SamplingParams p;
  p.top_k = 9;
  p.min_p = 0.01;
  p.presence_penalty = 0.5;
  p.logprobs = 3;
  RequestSampler alone(p, 9, {});
  const auto want = run(alone, 33, 40, 77);
  SamplingParams q;
  q.top_p = 0.5;
  q.logprobs = 20;
  SamplingParams g;
  g.temperature = 0;
  RequestSampler mine(p, 9, {}), other(q, 9, {}), greedy(g, 9, {});
  std::vector<int64_t> got;
  for (int step = 0; step < 40; ++step) {
    other.sample(random_logits(5003, uint64_t(step)));
    got.push_back(mine.sample(random_logits(33, 77 + uint64_t(step), 0.7)).token);
    greedy.sample(random_logits(7, uint64_t(step)));
  }
  EXPECT_EQ(got, want);
}

// Pearson's chi-square of n draws against the fp64 distribution; no draw outside its support.
void expect_draws_follow(const SamplingParams& p, const std::vector<float>& logits, int n) {
  const auto want = distribution(penalised(logits, {}, {}, p), p);
  RequestSampler sampler(p, 2024, {});
  std::map<int64_t, int> seen;
  for (int i = 0; i < n; ++i) ++seen[sampler.sample(logits).token];
  double chi2 = 0;
  int drawn = 0;
  for (const auto& [id, q] : want) {
    const double expected = q * n;
    const double d = seen[id] - expected;
    chi2 += d * d / expected;
    drawn += seen[id];
  }
  EXPECT_EQ(drawn, n) << "tokens outside the distribution were drawn";
  // df = support - 1; the bound is far in the tail (about 1e-6 for these sizes).
  const double df = double(want.size() - 1);
  EXPECT_LT(chi2, df + 7 * std::sqrt(2 * df) + 10) << "chi-square " << chi2 << " df " << df;
}

TEST(RequestSampler, DrawFrequenciesMatchTheDistribution) {
  expect_draws_follow({}, random_logits(33, 5, 1.0), 40000);  // no filter: id-order scan
  SamplingParams combined;
  combined.temperature = 1.2;
  combined.top_k = 8;
  combined.top_p = 0.95;
  combined.min_p = 0.02;
  expect_draws_follow(combined, random_logits(13, 6, 1.5), 40000);
  SamplingParams min_p_only;
  min_p_only.min_p = 0.1;
  expect_draws_follow(min_p_only, random_logits(13, 8, 1.0), 40000);
  SamplingParams nucleus;
  nucleus.top_p = 0.6;
  expect_draws_follow(nucleus, random_logits(7, 9, 1.0), 20000);
}

TEST(RequestSampler, LogprobsAreOfTheUnfilteredDistributionAfterTemperature) {
  SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 2;
  p.top_p = 0.5;
  p.logprobs = 20;
  const auto logits = random_logits(13, 21, 1.0);
  RequestSampler sampler(p, 4, {});
  const SampledToken t = sampler.sample(logits);
  const auto want = log_softmax(penalised(logits, {}, {}, p), p.temperature);
  ASSERT_EQ(t.top.size(), 13u);  // every id: top-k and top-p do not touch the logprobs
  double mass = 0;
  for (size_t i = 0; i < t.top.size(); ++i) {
    EXPECT_NEAR(t.top[i].second, want[size_t(t.top[i].first)], 1e-12);
    if (i > 0) {
      EXPECT_GE(t.top[i - 1].second, t.top[i].second);
    }
    mass += std::exp(t.top[i].second);
  }
  EXPECT_NEAR(mass, 1.0, 1e-12);
  EXPECT_NEAR(t.logprob, want[size_t(t.token)], 1e-12);
}

TEST(RequestSampler, LogprobTiesListTheLowerIdFirst) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f, 2.0f, 1.0f};
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 4;
  RequestSampler sampler(p, 0, {});
  const SampledToken t = sampler.sample(logits);
  ASSERT_EQ(t.top.size(), 4u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 3);
  EXPECT_EQ(t.top[2].first, 4);
  EXPECT_EQ(t.top[3].first, 2);
  const auto want = log_softmax(std::vector<double>(logits.begin(), logits.end()), 1.0);
  EXPECT_NEAR(t.logprob, want[1], 1e-12);  // greedy reports at temperature 1
  // Many ties over a longer row: 33 ids in three levels, the top level every third id.
  std::vector<float> levels(33);
  for (size_t i = 0; i < levels.size(); ++i) levels[i] = float((i * 7) % 3);
  p.logprobs = 20;
  RequestSampler many(p, 0, {});
  const SampledToken u = many.sample(levels);
  std::vector<int64_t> want_ids;
  for (float level : {2.0f, 1.0f}) {
    for (size_t i = 0; i < levels.size() && want_ids.size() < 20; ++i) {
      if (levels[i] == level) want_ids.push_back(int64_t(i));
    }
  }
  std::vector<int64_t> got_ids;
  for (const auto& [id, lp] : u.top) got_ids.push_back(id);
  EXPECT_EQ(got_ids, want_ids);
  EXPECT_EQ(u.token, want_ids[0]);
}

TEST(RequestSampler, ChosenTokenLogprobIsReportedOutsideTheTopN) {
  const auto logits = random_logits(13, 31, 0.3);  // flat: the draw often misses the top one
  SamplingParams p;
  p.logprobs = 1;
  RequestSampler sampler(p, 8, {});
  const auto want = log_softmax(std::vector<double>(logits.begin(), logits.end()), 1.0);
  int outside = 0;
  for (int i = 0; i < 50; ++i) {
    const SampledToken t = sampler.sample(logits);
    ASSERT_EQ(t.top.size(), 1u);
    EXPECT_NEAR(t.logprob, want[size_t(t.token)], 1e-12);
    outside += t.top[0].first != t.token;
  }
  EXPECT_GT(outside, 0);
  SamplingParams zero;
  zero.logprobs = 0;
  RequestSampler only_chosen(zero, 8, {});
  const SampledToken t = only_chosen.sample(logits);
  EXPECT_TRUE(t.top.empty());
  EXPECT_NEAR(t.logprob, want[size_t(t.token)], 1e-12);
}

TEST(RequestSampler, IdsAtOrAboveTheVocabularyLimitAreNeverDrawn) {
  auto logits = random_logits(13, 3, 1.0);
  for (size_t i = 10; i < 13; ++i) logits[i] = 50.0f;  // padding rows of a padded lm_head
  SamplingParams p;
  p.logprobs = 20;
  RequestSampler sampler(p, 1, {}, 10);
  double mass = 0;
  for (int i = 0; i < 2000; ++i) {
    const SampledToken t = sampler.sample(logits);
    ASSERT_LT(t.token, 10);
    ASSERT_EQ(t.top.size(), 10u);
    if (i == 0) {
      for (const auto& [id, lp] : t.top) mass += std::exp(lp);
    }
  }
  EXPECT_NEAR(mass, 1.0, 1e-12);
  SamplingParams g;
  g.temperature = 0;
  EXPECT_LT(RequestSampler(g, 0, {}, 10).sample(logits).token, 10);
}

TEST(RequestSampler, BadInputIsAnErrorNamingIt) {
  auto throws_with = [](auto fn, const std::string& part) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one naming " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  // Sampled, and greedy without penalties or logprobs (which scans the floats themselves).
  SamplingParams greedy;
  greedy.temperature = 0;
  for (const SamplingParams& p : {SamplingParams{}, greedy}) {
    std::vector<float> logits = {0.0f, 1.0f, NAN, 2.0f};
    throws_with([&] { RequestSampler(p, 0, {}).sample(logits); }, "logit 2");
    logits[2] = INFINITY;
    throws_with([&] { RequestSampler(p, 0, {}).sample(logits); }, "logit 2");
    logits[2] = -INFINITY;  // a masked id is fine
    EXPECT_NE(RequestSampler(p, 0, {}).sample(logits).token, 2);
    const std::vector<float> masked(5, -INFINITY);
    throws_with([&] { RequestSampler(p, 0, {}).sample(masked); }, "every allowed logit is -inf");
    // Ids past the vocabulary limit are never taken, even the largest.
    const int64_t t = RequestSampler(p, 0, {}, 3).sample(std::vector<float>{0, 1, -1, 9}).token;
    EXPECT_LT(t, 3);
    if (p.greedy()) {
      EXPECT_EQ(t, 1);
    }
  }
  std::vector<float> logits = {0.0f, 1.0f, -INFINITY, 2.0f};
  throws_with([&] { RequestSampler({}, 0, {}, 5).sample(logits); }, "vocab_limit 5");
  throws_with([&] { RequestSampler({}, 0, {}).sample({}); }, "empty logits");
  SamplingParams cold;
  cold.temperature = -1;
  throws_with([&] { RequestSampler(cold, 0, {}); }, "temperature");
  throws_with([] { RequestSampler({}, 0, {}).record(-3); }, "-3");
}

}  // namespace
}  // namespace tessel::serve
