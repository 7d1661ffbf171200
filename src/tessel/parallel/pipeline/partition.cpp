// SPDX-License-Identifier: Apache-2.0
// Contiguous stage partitions: the exact min-max split (dynamic programming over prefix sums for
// the optimal value, then a front-to-back greedy that lets each stage take as many layers as the
// optimum allows) and the "3,4,4,2" block-count syntax.
#include "tessel/parallel/pipeline/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "tessel/core/error.h"

namespace tessel::parallel::pipeline {
namespace {

void check_partition(const StagePartition& p) {
  TESSEL_CHECK(!p.first.empty(), "stage partition: no stages");
  TESSEL_CHECK(p.first[0] == 0, "stage partition: stage 0 must start at layer 0, got ", p.first[0]);
  for (size_t s = 1; s < p.first.size(); ++s) {
    TESSEL_CHECK(p.first[s] > p.first[s - 1], "stage partition: stage ", s, " starts at layer ",
                 p.first[s], ", not after stage ", s - 1, " at ", p.first[s - 1]);
  }
  TESSEL_CHECK(p.first.back() < p.layers, "stage partition: last stage starts at layer ",
               p.first.back(), " of only ", p.layers, " layers");
}

void check_costs(const std::vector<LayerCost>& costs) {
  for (const LayerCost& c : costs) {
    TESSEL_CHECK(std::isfinite(c.cost) && c.cost >= 0.0, "stage partition: cost of layer '", c.name,
                 "' must be finite and >= 0, got ", c.cost);
  }
}

// Indices of the first and last block, after checking the blocks are contiguous.
std::pair<int64_t, int64_t> block_range(const std::vector<std::string>& names) {
  int64_t begin = -1;
  int64_t end = -1;
  for (size_t i = 0; i < names.size(); ++i) {
    if (is_block_name(names[i])) {
      if (begin < 0) begin = static_cast<int64_t>(i);
      TESSEL_CHECK(end < 0 || end == static_cast<int64_t>(i), "stage partition: layer '",
                   names[i - 1], "' sits between blocks; only leading and trailing layers may be ",
                   "non-blocks");
      end = static_cast<int64_t>(i) + 1;
    }
  }
  TESSEL_CHECK(begin >= 0, "stage partition: no block layers (named h.<n>) among ", names.size(),
               " layers");
  return {begin, end};
}

}  // namespace

std::pair<int64_t, int64_t> StagePartition::layers_of(int64_t stage) const {
  TESSEL_CHECK(stage >= 0 && stage < num_stages(), "stage partition: stage ", stage,
               " out of range [0, ", num_stages(), ")");
  const size_t s = static_cast<size_t>(stage);
  return {first[s], s + 1 < first.size() ? first[s + 1] : layers};
}

int64_t StagePartition::stage_of(int64_t layer) const {
  TESSEL_CHECK(layer >= 0 && layer < layers, "stage partition: layer ", layer, " out of range [0, ",
               layers, ")");
  auto it = std::upper_bound(first.begin(), first.end(), layer);
  return static_cast<int64_t>(it - first.begin()) - 1;
}

std::vector<int64_t> StagePartition::sizes() const {
  std::vector<int64_t> out;
  for (int64_t s = 0; s < num_stages(); ++s) {
    auto [b, e] = layers_of(s);
    out.push_back(e - b);
  }
  return out;
}

std::vector<double> stage_costs(const StagePartition& partition,
                                const std::vector<LayerCost>& costs) {
  check_partition(partition);
  TESSEL_CHECK(static_cast<int64_t>(costs.size()) == partition.layers,
               "stage partition: ", costs.size(), " layer costs for a partition of ",
               partition.layers, " layers");
  std::vector<double> out;
  for (int64_t s = 0; s < partition.num_stages(); ++s) {
    auto [b, e] = partition.layers_of(s);
    double sum = 0.0;
    for (int64_t i = b; i < e; ++i) sum += costs[static_cast<size_t>(i)].cost;
    out.push_back(sum);
  }
  return out;
}

double max_stage_cost(const StagePartition& partition, const std::vector<LayerCost>& costs) {
  const std::vector<double> c = stage_costs(partition, costs);
  return *std::max_element(c.begin(), c.end());
}

double imbalance(const StagePartition& partition, const std::vector<LayerCost>& costs) {
  const std::vector<double> c = stage_costs(partition, costs);
  double total = 0.0;
  for (double x : c) total += x;
  if (total == 0.0) return 1.0;
  return *std::max_element(c.begin(), c.end()) / (total / static_cast<double>(c.size()));
}

StagePartition balance(const std::vector<LayerCost>& costs, int64_t stages) {
  const int64_t n = static_cast<int64_t>(costs.size());
  TESSEL_CHECK(stages >= 1, "stage partition: stages must be >= 1, got ", stages);
  TESSEL_CHECK(stages <= n, "stage partition: ", stages, " stages for only ", n,
               " layers; every stage needs at least one layer");
  check_costs(costs);

  // Every range sum goes through the same prefix differences, so the optimum found by the
  // dynamic programme compares exactly with the sums the construction below sees.
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    prefix[static_cast<size_t>(i) + 1] =
        prefix[static_cast<size_t>(i)] + costs[static_cast<size_t>(i)].cost;
  }
  auto sum = [&](int64_t b, int64_t e) {
    return prefix[static_cast<size_t>(e)] - prefix[static_cast<size_t>(b)];
  };

  // best[i]: smallest max stage cost splitting layers [0, i) into k stages (k = current round).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(static_cast<size_t>(n) + 1, inf);
  for (int64_t i = 1; i <= n; ++i) best[static_cast<size_t>(i)] = sum(0, i);
  for (int64_t k = 2; k <= stages; ++k) {
    std::vector<double> next(static_cast<size_t>(n) + 1, inf);
    for (int64_t i = k; i <= n; ++i) {
      double v = inf;
      for (int64_t j = k - 1; j < i; ++j) {
        v = std::min(v, std::max(best[static_cast<size_t>(j)], sum(j, i)));
      }
      next[static_cast<size_t>(i)] = v;
    }
    best = std::move(next);
  }
  const double optimum = best[static_cast<size_t>(n)];

  // min_parts[i]: fewest stages of cost <= optimum covering [i, n) (greedy longest stages). A
  // suffix splits into exactly r non-empty stages within the optimum iff
  // min_parts <= r <= its length, since splitting a stage never raises the maximum.
  std::vector<int64_t> min_parts(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t parts = 0;
    for (int64_t b = i; b < n;) {
      int64_t e = b + 1;
      while (e < n && sum(b, e + 1) <= optimum) ++e;
      b = e;
      ++parts;
    }
    min_parts[static_cast<size_t>(i)] = parts;
  }

  StagePartition out;
  out.layers = n;
  int64_t b = 0;
  for (int64_t s = 0; s < stages; ++s) {
    out.first.push_back(b);
    const int64_t rest = stages - 1 - s;
    if (rest == 0) break;
    int64_t chosen = -1;
    for (int64_t e = b + 1; e <= n - rest && sum(b, e) <= optimum; ++e) {
      if (min_parts[static_cast<size_t>(e)] <= rest) chosen = e;
    }
    TESSEL_CHECK(chosen > 0, "stage partition: internal error, no split for stage ", s);
    b = chosen;
  }
  check_partition(out);
  return out;
}

bool is_block_name(const std::string& name) {
  if (name.size() < 3 || name.compare(0, 2, "h.") != 0) return false;
  return std::all_of(name.begin() + 2, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

StagePartition explicit_partition(const std::string& spec,
                                  const std::vector<std::string>& layer_names) {
  auto [block_begin, block_end] = block_range(layer_names);
  const int64_t blocks = block_end - block_begin;

  std::vector<int64_t> counts;
  std::stringstream in(spec);
  std::string token;
  while (std::getline(in, token, ',')) {
    const auto b = token.find_first_not_of(' ');
    const auto e = token.find_last_not_of(' ');
    const std::string t = b == std::string::npos ? "" : token.substr(b, e - b + 1);
    TESSEL_CHECK(!t.empty() && t.size() <= 9 &&
                     std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }),
                 "stage partition spec '", spec, "': '", token,
                 "' is not a block count; expected positive integers like \"3,4,4,2\"");
    const int64_t count = std::stoll(t);
    TESSEL_CHECK(count > 0, "stage partition spec '", spec, "': stage ", counts.size(),
                 " has 0 blocks; every stage needs at least one");
    counts.push_back(count);
  }
  TESSEL_CHECK(!counts.empty() && spec.back() != ',', "stage partition spec '", spec,
               "': expected block counts per stage like \"3,4,4,2\"");
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  TESSEL_CHECK(total == blocks, "stage partition spec '", spec, "': counts sum to ", total,
               " but the model has ", blocks, " blocks");

  StagePartition out;
  out.layers = static_cast<int64_t>(layer_names.size());
  out.first.push_back(0);
  int64_t next = block_begin;
  for (size_t s = 0; s + 1 < counts.size(); ++s) {
    next += counts[s];
    out.first.push_back(next);
  }
  check_partition(out);
  return out;
}

std::string to_spec(const StagePartition& partition, const std::vector<std::string>& layer_names) {
  check_partition(partition);
  TESSEL_CHECK(static_cast<int64_t>(layer_names.size()) == partition.layers,
               "stage partition: ", layer_names.size(), " layer names for a partition of ",
               partition.layers, " layers");
  auto [block_begin, block_end] = block_range(layer_names);
  const int64_t last = partition.num_stages() - 1;
  TESSEL_CHECK(block_begin == 0 || partition.stage_of(block_begin - 1) == 0,
               "stage partition: leading layer '",
               layer_names[static_cast<size_t>(block_begin - 1)], "' is not on stage 0");
  TESSEL_CHECK(block_end == partition.layers || partition.stage_of(block_end) == last,
               "stage partition: trailing layer '", layer_names[static_cast<size_t>(block_end)],
               "' is not on the last stage ", last);
  std::string out;
  for (int64_t s = 0; s <= last; ++s) {
    auto [b, e] = partition.layers_of(s);
    const int64_t count = std::max<int64_t>(0, std::min(e, block_end) - std::max(b, block_begin));
    TESSEL_CHECK(count > 0, "stage partition: stage ", s, " holds no block");
    if (s > 0) out += ',';
    out += std::to_string(count);
  }
  return out;
}

std::vector<std::string> layer_names(const std::vector<LayerCost>& costs) {
  std::vector<std::string> out;
  for (const LayerCost& c : costs) out.push_back(c.name);
  return out;
}

int64_t rank_of_stage(int64_t stage, int64_t ranks) {
  TESSEL_CHECK(ranks >= 1, "stage partition: ranks must be >= 1, got ", ranks);
  TESSEL_CHECK(stage >= 0, "stage partition: stage must be >= 0, got ", stage);
  return stage % ranks;
}

}  // namespace tessel::parallel::pipeline
