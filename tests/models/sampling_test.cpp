// SPDX-License-Identifier: Apache-2.0
// Sampling: temperature 0 is the argmax; temperature rescales the softmax; top-k and top-p
// restrict the support (checked over many seeded draws, with frequencies near the renormalised
// probabilities); a seed replays its draws.
#include "tessel/models/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "tessel/core/error.h"

namespace tessel::models {
namespace {

// Probabilities 0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02 at shuffled ids (log-probs as logits).
const std::vector<float> kLogits = {std::log(0.1f),  std::log(0.4f),  std::log(0.02f),
                                    std::log(0.15f), std::log(0.05f), std::log(0.25f),
                                    std::log(0.03f)};

std::map<int64_t, int> draw(SamplingOptions o, int n) {
  Sampler s(o);
  std::map<int64_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[s.sample(kLogits)];
  return counts;
}

// Each observed frequency within 5 standard deviations of its expected probability.
void expect_frequencies(const std::map<int64_t, int>& counts, const std::map<int64_t, double>& p,
                        int n) {
  for (const auto& [id, c] : counts) {
    ASSERT_TRUE(p.count(id)) << "id " << id << " drawn " << c << " times, outside the support";
  }
  for (const auto& [id, prob] : p) {
    const double sd = std::sqrt(prob * (1 - prob) / n);
    const double f = counts.count(id) ? double(counts.at(id)) / n : 0.0;
    EXPECT_NEAR(f, prob, 5 * sd + 1e-12) << "id " << id;
  }
}

TEST(Sampling, TemperatureZeroIsArgmax) {
  SamplingOptions o;
  o.temperature = 0;
  o.seed = 3;
  Sampler s(o);
  for (int i = 0; i < 13; ++i) EXPECT_EQ(s.sample(kLogits), 1);
  EXPECT_EQ(argmax(std::vector<float>{1, 5, 5, 2}), 1);  // first maximum on ties
  EXPECT_EQ(argmax(std::vector<float>{-7}), 0);
  o.temperature = 1;
  o.top_k = 1;
  EXPECT_EQ(Sampler(o).sample(kLogits), 1);
}

TEST(Sampling, FullDistributionFollowsTheSoftmax) {
  SamplingOptions o;
  o.seed = 1;
  const int n = 20000;
  expect_frequencies(
      draw(o, n), {{1, 0.4}, {5, 0.25}, {3, 0.15}, {0, 0.1}, {4, 0.05}, {6, 0.03}, {2, 0.02}}, n);
}

TEST(Sampling, TemperatureSharpensAndFlattens) {
  for (double t : {0.5, 2.0}) {
    SamplingOptions o;
    o.temperature = t;
    const auto dist = Sampler(o).distribution(kLogits);
    ASSERT_EQ(dist.size(), 7u);
    double z = 0;
    for (float l : kLogits) z += std::exp(double(l) / t);
    for (const auto& [id, p] : dist) EXPECT_NEAR(p, std::exp(double(kLogits[id]) / t) / z, 1e-12);
    EXPECT_EQ(dist.front().first, 1);
  }
}

TEST(Sampling, TopKRestrictsTheSupport) {
  SamplingOptions o;
  o.top_k = 3;
  o.seed = 7;
  const int n = 20000;
  // 0.4, 0.25, 0.15 renormalised over 0.8.
  expect_frequencies(draw(o, n), {{1, 0.5}, {5, 0.3125}, {3, 0.1875}}, n);
  o.top_k = 100;  // larger than the vocabulary: no limit
  EXPECT_EQ(Sampler(o).distribution(kLogits).size(), 7u);
}

TEST(Sampling, TopPRestrictsTheSupport) {
  SamplingOptions o;
  o.top_p = 0.7;  // 0.4 + 0.25 = 0.65 < 0.7, so the third token (0.15) joins
  o.seed = 9;
  const int n = 20000;
  expect_frequencies(draw(o, n), {{1, 0.5}, {5, 0.3125}, {3, 0.1875}}, n);
  o.top_p = 0.3;  // the most likely token alone exceeds it
  const auto one = Sampler(o).distribution(kLogits);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].first, 1);
  EXPECT_DOUBLE_EQ(one[0].second, 1.0);
  o.top_p = 0.9;
  o.top_k = 2;  // top-k applies first, then top-p within it
  const auto both = Sampler(o).distribution(kLogits);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_NEAR(both[0].second, 0.4 / 0.65, 1e-6);
}

TEST(Sampling, SameSeedSameDraws) {
  SamplingOptions o;
  o.top_p = 0.95;
  o.temperature = 1.3;
  o.seed = 42;
  Sampler a(o), b(o);
  std::vector<int64_t> da, db, dc;
  for (int i = 0; i < 257; ++i) {
    da.push_back(a.sample(kLogits));
    db.push_back(b.sample(kLogits));
  }
  EXPECT_EQ(da, db);
  o.seed = 43;
  Sampler c(o);
  for (int i = 0; i < 257; ++i) dc.push_back(c.sample(kLogits));
  EXPECT_NE(da, dc);
}

TEST(Sampling, BadOptionsNameTheValue) {
  auto message = [](SamplingOptions o) {
    try {
      Sampler s(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  SamplingOptions o;
  o.temperature = -1;
  EXPECT_NE(message(o).find("temperature -1"), std::string::npos) << message(o);
  o = {};
  o.top_k = -2;
  EXPECT_NE(message(o).find("top-k -2"), std::string::npos) << message(o);
  o = {};
  o.top_p = 1.5;
  EXPECT_NE(message(o).find("top-p 1.5"), std::string::npos) << message(o);
  o = {};
  o.top_p = 0;
  EXPECT_NE(message(o).find("top-p 0"), std::string::npos) << message(o);
  Sampler s(SamplingOptions{});
  EXPECT_THROW(s.sample(std::vector<float>{}), Error);
  EXPECT_THROW(s.sample(std::vector<float>{1, NAN}), Error);
}

}  // namespace
}  // namespace tessel::models
