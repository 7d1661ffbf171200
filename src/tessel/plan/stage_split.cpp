// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/stage_split.h"

#include <algorithm>
#include <limits>

#include "tessel/core/error.h"

namespace tessel::plan {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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

int64_t in_flight_of(const StageSplitRequest& r, int stage) {
  return r.in_flight.empty() ? 1 : r.in_flight[size_t(stage)];
}

void check_request(const std::vector<LayerCost>& layers, const StageSplitRequest& r) {
  TESSEL_CHECK(r.stages >= 1 && r.micro_batches >= 1, "split_stages: stages ", r.stages,
               " and micro_batches ", r.micro_batches, " must be >= 1");
  TESSEL_CHECK(int64_t(layers.size()) >= r.stages, "split_stages: ", layers.size(),
               " layers cannot fill ", r.stages, " pipeline stages (each needs at least one)");
  TESSEL_CHECK(r.in_flight.empty() || int(r.in_flight.size()) == r.stages,
               "split_stages: ", r.in_flight.size(), " in-flight counts for ", r.stages, " stages");
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
  TESSEL_CHECK(int(first_layer.size()) == r.stages + 1 && first_layer.front() == 0 &&
                   first_layer.back() == int(layers.size()),
               "evaluate_split: boundaries must run from 0 to ", layers.size(), " in ",
               r.stages + 1, " entries");
  const Prefix p(layers);
  StageSplit s;
  s.first_layer = first_layer;
  s.feasible = true;
  double sum = 0;
  for (int k = 0; k < r.stages; ++k) {
    const int a = first_layer[size_t(k)], b = first_layer[size_t(k) + 1];
    TESSEL_CHECK(a < b, "evaluate_split: stage ", k, " is empty (", a, " .. ", b, ")");
    const double t = p.time(a, b), bytes = p.bytes(a, b, in_flight_of(r, k));
    s.stage_seconds.push_back(t);
    s.stage_bytes.push_back(bytes);
    s.max_stage_seconds = std::max(s.max_stage_seconds, t);
    sum += t;
    if (r.memory_bytes > 0 && bytes > r.memory_bytes) s.feasible = false;
  }
  s.pipeline_seconds = sum + double(r.micro_batches - 1) * s.max_stage_seconds;
  return s;
}

StageSplit split_stages(const std::vector<LayerCost>& layers, const StageSplitRequest& r) {
  check_request(layers, r);
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
    StageSplit split = evaluate_split(layers, r, first);
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
