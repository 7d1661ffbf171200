// SPDX-License-Identifier: Apache-2.0
// Seeded workload generation for `tessel bench serve`: lengths, prompts, Poisson arrivals.
#include "tessel/serve/serve_bench_workload.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

#include "tessel/core/error.h"

namespace tessel::serve {

double BenchRng::uniform() {
  return double(engine_() >> 11) * 0x1.0p-53;
}

int64_t BenchRng::uniform_int(int64_t a, int64_t b) {
  TESSEL_CHECK(a <= b, "uniform_int: empty range [", a, ", ", b, "]");
  const uint64_t span = uint64_t(b) - uint64_t(a) + 1;  // 0: the whole 64-bit range
  if (span == 0) return int64_t(engine_());
  // Reject the top partial copy of [0, span) so every value is equally likely.
  const uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
  uint64_t x;
  do x = engine_();
  while (x >= limit);
  return a + int64_t(x % span);
}

double BenchRng::normal() {
  const double u1 = 1.0 - uniform();  // in (0, 1]: log is finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double BenchRng::exponential(double rate) {
  return -std::log(1.0 - uniform()) / rate;
}

namespace {

double parse_number(const std::string& s, const std::string& what, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TESSEL_CHECK(
      !s.empty() && used == s.size() && std::isfinite(v), what, ": '", text,
      "' expected N, uniform:A:B or normal:MEAN:SD with numbers (e.g. 128, uniform:32:512)");
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string p;
  while (std::getline(in, p, sep)) parts.push_back(p);
  if (!s.empty() && s.back() == sep) parts.emplace_back();
  return parts;
}

// SplitMix64 (Steele, Lea, Flood 2014): request i's generator seed from (seed, i), so nearby
// indices get unrelated streams.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

LengthDistribution LengthDistribution::parse(const std::string& text, const std::string& what) {
  const std::vector<std::string> parts = split(text, ':');
  LengthDistribution d;
  if (parts.size() == 1) {
    d.kind_ = Kind::kFixed;
    d.a_ = d.b_ = parse_number(parts[0], what, text);
  } else if (parts.size() == 3 && parts[0] == "uniform") {
    d.kind_ = Kind::kUniform;
    d.a_ = parse_number(parts[1], what, text);
    d.b_ = parse_number(parts[2], what, text);
    TESSEL_CHECK(d.a_ <= d.b_, what, ": '", text, "' has A = ", d.a_, " > B = ", d.b_);
  } else if (parts.size() == 3 && parts[0] == "normal") {
    d.kind_ = Kind::kNormal;
    d.a_ = parse_number(parts[1], what, text);
    d.b_ = parse_number(parts[2], what, text);
    TESSEL_CHECK(d.b_ >= 0, what, ": '", text, "' has a negative SD ", d.b_);
  } else {
    TESSEL_CHECK(false, what, ": '", text,
                 "' expected N, uniform:A:B or normal:MEAN:SD (e.g. 128, uniform:32:512)");
  }
  TESSEL_CHECK(d.a_ == std::floor(d.a_) || d.kind_ == Kind::kNormal, what, ": '", text,
               "' lengths are whole numbers of tokens");
  TESSEL_CHECK(d.b_ == std::floor(d.b_) || d.kind_ == Kind::kNormal, what, ": '", text,
               "' lengths are whole numbers of tokens");
  TESSEL_CHECK(d.a_ >= 1, what, ": '", text, "' lengths must be at least 1 token");
  return d;
}

int64_t LengthDistribution::sample(BenchRng& rng) const {
  switch (kind_) {
    case Kind::kFixed:
      return int64_t(a_);
    case Kind::kUniform:
      return rng.uniform_int(int64_t(a_), int64_t(b_));
    case Kind::kNormal:
      return std::max<int64_t>(1, std::llround(a_ + b_ * rng.normal()));
  }
  return int64_t(a_);
}

int64_t LengthDistribution::max() const {
  switch (kind_) {
    case Kind::kFixed:
      return int64_t(a_);
    case Kind::kUniform:
      return int64_t(b_);
    case Kind::kNormal:
      return std::max<int64_t>(1, std::llround(a_ + 6.0 * b_));
  }
  return int64_t(a_);
}

std::string LengthDistribution::describe() const {
  std::ostringstream out;
  switch (kind_) {
    case Kind::kFixed:
      out << int64_t(a_);
      break;
    case Kind::kUniform:
      out << "uniform:" << int64_t(a_) << ":" << int64_t(b_);
      break;
    case Kind::kNormal:
      out << "normal:" << a_ << ":" << b_;
      break;
  }
  return out.str();
}

std::vector<std::string> split_dataset(const std::string& text) {
  std::vector<std::string> lines = split(text, '\n');
  for (std::string& l : lines) {
    while (!l.empty() && std::isspace(static_cast<unsigned char>(l.back()))) l.pop_back();
  }
  bool fortune = false;
  for (const std::string& l : lines) fortune = fortune || l == "%";
  std::vector<std::string> out;
  if (!fortune) {
    for (std::string& l : lines)
      if (!l.empty()) out.push_back(std::move(l));
    return out;
  }
  std::string entry;
  for (const std::string& l : lines) {
    if (l == "%") {
      if (!entry.empty()) out.push_back(entry);
      entry.clear();
    } else if (!l.empty() || !entry.empty()) {
      entry += entry.empty() ? l : "\n" + l;
    }
  }
  while (!entry.empty() && entry.back() == '\n') entry.pop_back();
  if (!entry.empty()) out.push_back(entry);
  return out;
}

Workload::Workload(WorkloadSpec spec) : spec_(std::move(spec)) {
  TESSEL_CHECK(spec_.first_id >= 0 && spec_.first_id < spec_.vocab_size,
               "bench serve: prompt ids from [", spec_.first_id, ", ", spec_.vocab_size,
               ") is an empty range");
  TESSEL_CHECK(
      spec_.shared_prefix_tokens >= 0 && (spec_.shared_prefix_tokens == 0 || spec_.dataset.empty()),
      "bench serve: --shared-prefix-tokens ", spec_.shared_prefix_tokens,
      " must be >= 0, and works with random-id prompts only (not with --dataset)");
  BenchRng prefix_rng(mix(spec_.seed ^ 0x5a4edf1e7ULL));
  prefix_.resize(size_t(spec_.shared_prefix_tokens));
  for (int64_t& id : prefix_) id = prefix_rng.uniform_int(spec_.first_id, spec_.vocab_size - 1);
  // Fisher-Yates with the workload's own generator: each entry is used once before any repeats.
  const int64_t n = int64_t(spec_.dataset.size());
  order_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) order_[size_t(i)] = i;
  BenchRng rng(mix(spec_.seed ^ 0x5eedda7a5e7ULL));
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order_[size_t(i)], order_[size_t(rng.uniform_int(0, i))]);
}

BenchRequest Workload::request(int64_t index) const {
  BenchRng rng(mix(spec_.seed * 0x100000001b3ULL + uint64_t(index)));
  BenchRequest r;
  r.index = index;
  r.max_tokens = spec_.output_tokens.sample(rng);
  if (!spec_.dataset.empty()) {
    r.prompt_text = spec_.dataset[size_t(order_[size_t(index % int64_t(order_.size()))])];
    return r;
  }
  const int64_t n = spec_.prompt_tokens.sample(rng);
  r.prompt_ids = prefix_;
  r.prompt_ids.resize(prefix_.size() + size_t(n));
  for (size_t i = prefix_.size(); i < r.prompt_ids.size(); ++i)
    r.prompt_ids[i] = rng.uniform_int(spec_.first_id, spec_.vocab_size - 1);
  return r;
}

PoissonArrivals::PoissonArrivals(double rate, uint64_t seed)
    : rate_(rate), rng_(mix(seed ^ 0xa771ULL)) {
  TESSEL_CHECK(rate > 0 && std::isfinite(rate), "bench serve: --rate ", rate,
               " must be a positive number of requests per second");
}

double PoissonArrivals::next() {
  if (first_) {
    first_ = false;
    return t_;
  }
  t_ += rng_.exponential(rate_);
  return t_;
}

}  // namespace tessel::serve
