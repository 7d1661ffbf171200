// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/stage_split.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "tessel/core/error.h"

namespace tessel::plan {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kPairMovesUpTo = 32;  // chunks

struct Prefix {
  std::vector<double> seconds, state, activation;
  explicit Prefix(const std::vector<LayerCost>& layers)
      : seconds(layers.size() + 1), state(layers.size() + 1), activation(layers.size() + 1) {
    for (size_t i = 0; i < layers.size(); ++i) {
      seconds[i + 1] = seconds[i] + layers[i].seconds;
      state[i + 1] = state[i] + layers[i].state_bytes;
      activation[i + 1] = activation[i] + layers[i].activation_bytes;
    }
  }
  double time(int a, int b) const { return seconds[size_t(b)] - seconds[size_t(a)]; }
  double bytes(int a, int b, int64_t in_flight) const {
    return state[size_t(b)] - state[size_t(a)] +
           double(in_flight) * (activation[size_t(b)] - activation[size_t(a)]);
  }
};

// In-flight micro-batches of the rank that holds stage (chunk) `stage`.
int64_t in_flight_of(const StageSplitRequest& r, int stage) {
  return r.in_flight.empty() ? 1 : r.in_flight[size_t(stage % r.stages)];
}

void check_request(const std::vector<LayerCost>& layers, const StageSplitRequest& r) {
  TESSEL_CHECK(r.stages >= 1 && r.micro_batches >= 1 && r.chunks_per_rank >= 1,
               "split_stages: stages ", r.stages, ", micro_batches ", r.micro_batches,
               " and chunks_per_rank ", r.chunks_per_rank, " must be >= 1");
  const int64_t chunks = int64_t(r.stages) * r.chunks_per_rank;
  TESSEL_CHECK(int64_t(layers.size()) >= chunks, "split_stages: ", layers.size(),
               " layers cannot fill ", chunks, " pipeline stages (each needs at least one)");
  TESSEL_CHECK(r.in_flight.empty() || int(r.in_flight.size()) == r.stages,
               "split_stages: ", r.in_flight.size(), " in-flight counts for ", r.stages, " stages");
}

// The figures of a split whose boundaries are known to be valid, from the layers' prefix sums
// (built once per search: the enumeration and the descent evaluate thousands of splits).
StageSplit evaluate(const Prefix& p, const StageSplitRequest& r,
                    const std::vector<int>& first_layer) {
  const int chunks = r.stages * r.chunks_per_rank;
  StageSplit s;
  s.first_layer = first_layer;
  s.feasible = true;
  s.rank_seconds.assign(size_t(r.stages), 0.0);
  s.rank_bytes.assign(size_t(r.stages), 0.0);
  double sum = 0;
  for (int k = 0; k < chunks; ++k) {
    const int a = first_layer[size_t(k)], b = first_layer[size_t(k) + 1];
    const double t = p.time(a, b), bytes = p.bytes(a, b, in_flight_of(r, k));
    s.stage_seconds.push_back(t);
    s.stage_bytes.push_back(bytes);
    s.rank_seconds[size_t(k % r.stages)] += t;
    s.rank_bytes[size_t(k % r.stages)] += bytes;
    s.max_stage_seconds = std::max(s.max_stage_seconds, t);
    sum += t;
  }
  for (double bytes : s.rank_bytes)
    if (r.memory_bytes > 0 && bytes > r.memory_bytes) s.feasible = false;
  if (r.chunks_per_rank == 1) {
    s.pipeline_seconds = sum + double(r.micro_batches - 1) * s.max_stage_seconds;
  } else {
    double before = 0;
    for (int rank = 0; rank < r.stages; ++rank) {
      s.pipeline_seconds = std::max(
          s.pipeline_seconds, before + double(r.micro_batches) * s.rank_seconds[size_t(rank)]);
      before += s.stage_seconds[size_t(rank)];
    }
  }
  return s;
}

// The descent's order on splits: the fullest rank's overflow of the memory bound first, then the
// ranks' finishing times (sum of the chunks before the rank's first + B * its chunks) from the
// latest down, so a move that only relieves the second-slowest rank still counts.
std::vector<double> descent_key(const StageSplit& s, const StageSplitRequest& r) {
  double overflow = 0;
  if (r.memory_bytes > 0)
    for (double b : s.rank_bytes) overflow = std::max(overflow, b - r.memory_bytes);
  std::vector<double> key{overflow};
  double before = 0;
  for (int rank = 0; rank < r.stages; ++rank) {
    key.push_back(before + double(r.micro_batches) * s.rank_seconds[size_t(rank)]);
    before += s.stage_seconds[size_t(rank)];
  }
  std::sort(key.begin() + 1, key.end(), std::greater<>());
  return key;
}

// C(n, k), or `cap` + 1 once it passes `cap`.
int64_t choose_capped(int64_t n, int64_t k, int64_t cap) {
  double c = 1;
  for (int64_t i = 1; i <= k; ++i) {
    c = c * double(n - k + i) / double(i);
    if (c > double(cap)) return cap + 1;
  }
  return int64_t(c + 0.5);
}

// Every split, the one of least key (descent_key's order).
StageSplit enumerate_interleaved(const std::vector<LayerCost>& layers, const StageSplitRequest& r) {
  const int n = int(layers.size()), chunks = r.stages * r.chunks_per_rank;
  const Prefix p(layers);
  std::vector<int> first(size_t(chunks) + 1, 0);
  first.back() = n;
  StageSplit best;
  std::vector<double> best_key;
  std::function<void(int)> place = [&](int c) {  // boundary c: the first layer of chunk c
    if (c == chunks) {
      StageSplit s = evaluate(p, r, first);
      std::vector<double> key = descent_key(s, r);
      if (best_key.empty() || key < best_key) {
        best_key = std::move(key);
        best = std::move(s);
      }
      return;
    }
    for (int e = first[size_t(c) - 1] + 1; e <= n - (chunks - c); ++e) {
      first[size_t(c)] = e;
      place(c + 1);
    }
  };
  place(1);
  return best;
}

StageSplit split_interleaved(const std::vector<LayerCost>& layers, const StageSplitRequest& r) {
  const int chunks = r.stages * r.chunks_per_rank;
  const auto result = [](const StageSplit& best) {
    if (best.feasible) return best;
    StageSplit none;
    none.least_stage_bytes = *std::max_element(best.rank_bytes.begin(), best.rank_bytes.end());
    return none;
  };
  if (choose_capped(int64_t(layers.size()) - 1, chunks - 1, r.enumerate_up_to) <= r.enumerate_up_to)
    return result(enumerate_interleaved(layers, r));
  // The start: the least bottleneck over the chunks (Alpa's DP with B * V micro-batches weighs
  // the slowest chunk above all; the sum of the chunks is every split's same total).
  StageSplitRequest flat;
  flat.stages = chunks;
  flat.micro_batches = r.micro_batches * r.chunks_per_rank;
  const Prefix p(layers);
  StageSplit best = evaluate(p, r, split_stages(layers, flat).first_layer);
  std::vector<double> best_key = descent_key(best, r);
  // Steepest descent over single-layer shifts of a run of consecutive boundaries (one boundary
  // trades a layer between neighbouring chunks, which live on neighbouring ranks; a run hands a
  // layer from the chunk before it to the chunk it ends at while the chunks between keep their
  // sizes) and, on small splits, of two boundaries each its own way. Every accepted move lowers
  // the key, so no split comes back and the descent ends.
  const auto valid = [](const std::vector<int>& f) {
    for (size_t i = 1; i < f.size(); ++i)
      if (f[i] <= f[i - 1]) return false;
    return true;
  };
  for (bool moved = true; moved;) {
    moved = false;
    const std::vector<int> first = best.first_layer;
    std::vector<double> step_key = best_key;
    StageSplit step_split;
    const auto consider = [&](const std::vector<int>& f) {
      if (!valid(f)) return;
      StageSplit s = evaluate(p, r, f);
      std::vector<double> key = descent_key(s, r);
      if (key < step_key) {
        step_key = std::move(key);
        step_split = std::move(s);
        moved = true;
      }
    };
    for (int b = 1; b < chunks; ++b)
      for (int run = 1; b + run <= chunks; ++run)
        for (int d : {-1, 1}) {
          std::vector<int> f = first;
          for (int i = b; i < b + run; ++i) f[size_t(i)] += d;
          consider(f);
        }
    if (chunks <= kPairMovesUpTo)
      for (int b = 1; b < chunks; ++b)
        for (int e = b + 1; e < chunks; ++e)
          for (int db : {-1, 1})
            for (int de : {-1, 1}) {
              std::vector<int> f = first;
              f[size_t(b)] += db;
              f[size_t(e)] += de;
              consider(f);
            }
    if (moved) {
      best = std::move(step_split);
      best_key = std::move(step_key);
    }
  }
  return result(best);
}

}  // namespace

std::vector<int64_t> in_flight_micro_batches(const std::string& schedule, int stages,
                                             int64_t micro_batches) {
  TESSEL_CHECK(stages >= 1 && micro_batches >= 1, "in_flight_micro_batches: stages ", stages,
               " and micro_batches ", micro_batches, " must be >= 1");
  const bool gpipe = schedule == "gpipe";
  TESSEL_CHECK(gpipe || schedule == "1f1b" || schedule.rfind("interleaved:", 0) == 0,
               "pipeline schedule '", schedule, "' is not gpipe, 1f1b or interleaved:V");
  std::vector<int64_t> out;
  for (int s = 0; s < stages; ++s)
    out.push_back(gpipe ? micro_batches : std::min<int64_t>(stages - s, micro_batches));
  return out;
}

StageSplit evaluate_split(const std::vector<LayerCost>& layers, const StageSplitRequest& r,
                          const std::vector<int>& first_layer) {
  check_request(layers, r);
  const int chunks = r.stages * r.chunks_per_rank;
  TESSEL_CHECK(int(first_layer.size()) == chunks + 1 && first_layer.front() == 0 &&
                   first_layer.back() == int(layers.size()),
               "evaluate_split: boundaries must run from 0 to ", layers.size(), " in ", chunks + 1,
               " entries");
  for (int k = 0; k < chunks; ++k)
    TESSEL_CHECK(first_layer[size_t(k)] < first_layer[size_t(k) + 1], "evaluate_split: stage ", k,
                 " is empty (", first_layer[size_t(k)], " .. ", first_layer[size_t(k) + 1], ")");
  return evaluate(Prefix(layers), r, first_layer);
}

StageSplit split_stages(const std::vector<LayerCost>& layers, const StageSplitRequest& r) {
  check_request(layers, r);
  if (r.chunks_per_rank > 1) return split_interleaved(layers, r);
  const int n = int(layers.size()), S = r.stages;
  const Prefix p(layers);
  // The candidates for t_max: every contiguous range's time (the slowest stage is one of them).
  std::vector<double> candidates;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b <= n; ++b) candidates.push_back(p.time(a, b));
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());

  auto fits = [&](int a, int b, int stage) {
    return r.memory_bytes <= 0 || p.bytes(a, b, in_flight_of(r, stage)) <= r.memory_bytes;
  };
  // F[s][k]: least sum of stage times covering layers k..n-1 with stages s..S-1, each at most
  // t_max and within memory; next[s][k] the chosen end of stage s.
  std::vector<std::vector<double>> F(size_t(S) + 1, std::vector<double>(size_t(n) + 1, kInf));
  std::vector<std::vector<int>> next(size_t(S), std::vector<int>(size_t(n) + 1, -1));
  StageSplit best;
  double best_total = kInf;
  for (double t_max : candidates) {
    // Alpa's early stop: the (B - 1) * t_max term alone already loses.
    if (double(r.micro_batches - 1) * t_max >= best_total) break;
    for (auto& row : F) std::fill(row.begin(), row.end(), kInf);
    F[size_t(S)][size_t(n)] = 0;
    for (int s = S - 1; s >= 0; --s) {
      // Stage s starts at k; the stages after it need at least S - 1 - s layers.
      for (int k = s; k <= n - (S - s); ++k) {
        double& f = F[size_t(s)][size_t(k)];
        for (int e = k + 1; e <= n - (S - 1 - s); ++e) {
          const double t = p.time(k, e);
          if (t > t_max) break;  // times only grow with e
          const double rest = F[size_t(s) + 1][size_t(e)];
          if (rest == kInf || !fits(k, e, s)) continue;
          if (t + rest < f) {
            f = t + rest;
            next[size_t(s)][size_t(k)] = e;
          }
        }
      }
    }
    const double sum = F[0][0];
    if (sum == kInf) continue;
    std::vector<int> first{0};
    for (int s = 0; s < S; ++s) first.push_back(next[size_t(s)][size_t(first.back())]);
    // Its own slowest stage may be below t_max: the split's true time.
    StageSplit split = evaluate(p, r, first);
    if (split.pipeline_seconds < best_total) {
      best_total = split.pipeline_seconds;
      best = std::move(split);
    }
  }
  if (best.feasible) return best;
  // Nothing fits: the least memory the fullest stage of any split needs (the same DP over bytes).
  std::vector<std::vector<double>> M(size_t(S) + 1, std::vector<double>(size_t(n) + 1, kInf));
  M[size_t(S)][size_t(n)] = 0;
  for (int s = S - 1; s >= 0; --s)
    for (int k = s; k <= n - (S - s); ++k)
      for (int e = k + 1; e <= n - (S - 1 - s); ++e)
        M[size_t(s)][size_t(k)] =
            std::min(M[size_t(s)][size_t(k)],
                     std::max(p.bytes(k, e, in_flight_of(r, s)), M[size_t(s) + 1][size_t(e)]));
  StageSplit none;
  none.least_stage_bytes = M[0][0];
  return none;
}

}  // namespace tessel::plan
