// SPDX-License-Identifier: Apache-2.0
// What the engine tests share: deterministic prompts, and a sink that collects every delta of
// every request and waits for their ends.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tessel/core/rng.h"
#include "tessel/serve/engine.h"

namespace tessel::serve::engine_testing {

// N token ids below 256, a pure function of SEED.
inline std::vector<int64_t> prompt_of(int64_t n, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[size_t(i)] = int64_t(uniform_at(seed, 0, uint64_t(i)) * 256.0f) % 256;
  return ids;
}

// Collects every delta of every request and waits for their ends.
class Collector {
 public:
  DeltaSink sink(const std::string& id) {
    return [this, id](const Delta& d) {
      std::lock_guard<std::mutex> lock(mu_);
      deltas_[id].push_back(d);
      if (d.finish != FinishReason::kNone) ++finished_[id];
      done_.notify_all();
    };
  }
  void wait(const std::string& id, int64_t choices = 1) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(
        done_.wait_for(lock, std::chrono::seconds(120), [&] { return finished_[id] >= choices; }))
        << "request " << id << " did not finish";
  }
  std::vector<Delta> of(const std::string& id, int64_t choice = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Delta> out;
    for (const Delta& d : deltas_[id])
      if (d.index == choice) out.push_back(d);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::map<std::string, std::vector<Delta>> deltas_;
  std::map<std::string, int64_t> finished_;
};

struct Output {
  std::vector<int64_t> tokens;
  std::vector<double> logprobs;
  std::string text;
  FinishReason finish = FinishReason::kNone;
};

inline Output output_of(const std::vector<Delta>& deltas) {
  Output o;
  for (const Delta& d : deltas) {
    o.tokens.insert(o.tokens.end(), d.tokens.begin(), d.tokens.end());
    for (const TokenLogprob& l : d.logprobs) {
      o.logprobs.push_back(l.logprob);
      for (const auto& [id, lp] : l.top) o.logprobs.push_back(lp + double(id));
    }
    o.text += d.text;
    if (d.finish != FinishReason::kNone) o.finish = d.finish;
  }
  return o;
}

}  // namespace tessel::serve::engine_testing
