// SPDX-License-Identifier: Apache-2.0
// The workload of `tessel bench serve`: prompt and output lengths drawn from a distribution,
// prompts of random token ids or taken from a text dataset, and Poisson arrival times for the open
// loop. Request i depends only on (seed, i), never on the order in which clients take requests, so
// a run at any concurrency and the in-process baseline see the very same requests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tessel::serve {

// Random numbers for the workload from std::mt19937_64, whose output the C++ standard fixes, with
// hand-written transforms (the standard library's distributions differ between implementations),
// so a seed names the same workload on every machine.
class BenchRng {
 public:
  explicit BenchRng(uint64_t seed) : engine_(seed) {}
  double uniform();                           // in [0, 1), 53 random bits
  int64_t uniform_int(int64_t a, int64_t b);  // in [a, b], unbiased (rejection)
  double normal();                            // N(0, 1), Box-Muller
  double exponential(double rate);            // mean 1 / rate

 private:
  std::mt19937_64 engine_;
};

// "N" (fixed), "uniform:A:B" (integers A..B inclusive), "normal:MEAN:SD" (rounded, at least 1).
class LengthDistribution {
 public:
  LengthDistribution() = default;
  // `what` names the flag in errors.
  static LengthDistribution parse(const std::string& text, const std::string& what);
  int64_t sample(BenchRng& rng) const;
  int64_t max() const;  // the longest length it can give (normal: mean + 6 SD)
  std::string describe() const;

 private:
  enum class Kind { kFixed, kUniform, kNormal };
  Kind kind_ = Kind::kFixed;
  double a_ = 1, b_ = 1;
};

// Prompts from a text file: a fortune(6) file (entries between lines holding only "%") gives one
// prompt per entry, any other text one per non-empty line. Trailing whitespace is trimmed.
std::vector<std::string> split_dataset(const std::string& text);

struct WorkloadSpec {
  uint64_t seed = 0;
  LengthDistribution prompt_tokens, output_tokens;
  int64_t vocab_size = 32000;  // random prompt ids are drawn from [first_id, vocab_size)
  int64_t first_id = 0;
  std::vector<std::string> dataset;  // non-empty: text prompts from it instead of random ids
  // Random-id prompts only: this many ids (drawn from the seed alone) open every prompt, as a
  // shared system prompt would, before the request's own prompt_tokens; what a prefix cache
  // saves.
  int64_t shared_prefix_tokens = 0;
};

struct BenchRequest {
  int64_t index = 0;
  std::vector<int64_t> prompt_ids;  // random ids (no dataset)
  std::string prompt_text;          // a dataset entry
  int64_t max_tokens = 0;
};

class Workload {
 public:
  explicit Workload(WorkloadSpec spec);
  BenchRequest request(int64_t index) const;
  const WorkloadSpec& spec() const { return spec_; }

 private:
  WorkloadSpec spec_;
  std::vector<int64_t> order_;   // a seeded permutation of the dataset's entries
  std::vector<int64_t> prefix_;  // the shared prefix of every random-id prompt
};

// Arrival times of a Poisson process of `rate` requests/s: the first at 0, then exponential gaps.
class PoissonArrivals {
 public:
  PoissonArrivals(double rate, uint64_t seed);
  double next();  // seconds from the start of the run

 private:
  double rate_, t_ = 0;
  bool first_ = true;
  BenchRng rng_;
};

}  // namespace tessel::serve
