// SPDX-License-Identifier: Apache-2.0
// Choosing the next token from logits: greedy (temperature 0), or a draw from the softmax of
// logits / temperature restricted to the k most likely tokens (top-k) and to the smallest set
// whose probability reaches p (nucleus sampling, Holtzman et al., "The Curious Case of Neural Text
// Degeneration", 2020). Draws come from a seeded counter-based generator, so a seed replays.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tessel/core/rng.h"

namespace tessel::models {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (argmax, the first maximum on ties)
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // in (0, 1]; 1: no limit
  uint64_t seed = 0;

  void validate() const;  // throws Error naming the bad value
  bool greedy() const { return temperature == 0.0 || top_k == 1; }
};

// Index of the first maximum (torch.argmax's rule).
int64_t argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  const SamplingOptions& options() const { return options_; }

  // The candidates left after temperature, top-k and top-p, with their renormalised
  // probabilities, most likely first (ties: lower id first). Greedy gives the argmax alone.
  std::vector<std::pair<int64_t, double>> distribution(std::span<const float> logits) const;
  // Draws one token id; each call consumes one number of the generator.
  int64_t sample(std::span<const float> logits);

 private:
  SamplingOptions options_;
  Generator generator_;
};

}  // namespace tessel::models
