// SPDX-License-Identifier: Apache-2.0
// The serving layouts enumerated, costed and ranked (plan/serve_search.h).
#include "tessel/plan/serve_search.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel::plan {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// The layouts of `chips` chips: tessel's 1D split with pipeline stages, and on one stage the
// paper's other layouts (2D weight-stationary once each axis has two chips, weight-gathered).
std::vector<ServeLayout> layouts_of(const ServeShape& s, int chips) {
  std::vector<ServeLayout> out;
  for (int pp : divisors(chips)) {
    if (pp > s.layers) continue;
    const int tp = chips / pp;
    if (s.heads % tp == 0)
      out.push_back({FfnLayout::WeightStationary1D, AttentionSharding::Heads, tp, 1, pp, 1});
  }
  // A mixture of experts: its experts spread over ep groups of tp chips (`--ep E --tp T`).
  for (int ep : divisors(chips)) {
    const int tp = chips / ep;
    if (ep > 1 && s.heads % tp == 0 && expert_split_refusal(s.experts, ep).empty())
      out.push_back({FfnLayout::WeightStationary1D, AttentionSharding::Heads, tp, 1, 1, ep});
  }
  if (chips > 1) {
    out.push_back({FfnLayout::WeightStationary1D, AttentionSharding::Batch, chips, 1, 1, 1});
    out.push_back({FfnLayout::WeightGathered, AttentionSharding::Batch, chips, 1, 1, 1});
    for (int x : divisors(chips)) {
      const int yz = chips / x;
      if (x < 2 || yz < 2 || s.d_model % x != 0 || s.d_ff % yz != 0) continue;
      for (AttentionSharding a : {AttentionSharding::Heads, AttentionSharding::Batch})
        if (a == AttentionSharding::Batch || s.heads % yz == 0)
          out.push_back({FfnLayout::WeightStationary2D, a, chips, x, 1, 1});
    }
  }
  return out;
}

bool better(const ServeRow& a, const ServeRow& b) {
  if (a.meets_target != b.meets_target) return a.meets_target;
  if (a.cost.chip_seconds_per_token != b.cost.chip_seconds_per_token)
    return a.cost.chip_seconds_per_token < b.cost.chip_seconds_per_token;
  return a.cost.seconds < b.cost.seconds;
}

void search_phase(const Cluster& cluster, const ServeRequest& req, ServePhase phase,
                  std::vector<ServeRow>& rows) {
  const double target =
      phase == ServePhase::Decode ? req.decode_latency_target : req.prefill_latency_target;
  for (int chips : divisors(req.devices)) {
    const Cluster c = cluster.with_devices(chips);
    for (const ServeLayout& layout : layouts_of(req.shape, chips)) {
      std::string refusal;
      if (!layout.runnable())
        refusal =
            "prediction only: tessel serve runs 1D weight-stationary with heads-sharded attention";
      else if (req.tp_refusal && layout.tp > 1)
        refusal = req.tp_refusal(layout.tp);
      std::vector<int64_t> batches = req.batches;
      if (batches.empty())
        for (int64_t b = 1; b <= 4096; b *= 2) batches.push_back(b);
      for (int64_t b : batches) {
        ServeWorkload w = req.workload;
        w.phase = phase;
        w.batch = b;
        ServeRow row{
            phase, layout,
            b,     serve_cost(c, req.shape, layout, w, req.tp_weights, req.config, req.memory),
            true,  refusal};
        if (!row.cost.fits) {
          if (req.batches.empty()) break;  // larger batches do not fit either
          continue;
        }
        row.meets_target = target <= 0 || row.cost.latency_per_token <= target;
        rows.push_back(std::move(row));
      }
    }
  }
  std::stable_sort(rows.begin(), rows.end(), better);
}

}  // namespace

ServePlans search_serve(const Cluster& cluster, const ServeRequest& req) {
  TESSEL_CHECK(req.devices >= 1, "plan --serve: --devices ", req.devices, " must be >= 1");
  ServePlans out;
  search_phase(cluster, req, ServePhase::Prefill, out.prefill);
  search_phase(cluster, req, ServePhase::Decode, out.decode);
  auto pick = [](const std::vector<ServeRow>& rows, std::optional<ServeRow>& best,
                 std::optional<ServeRow>& fastest) {
    if (rows.empty()) return;
    if (rows.front().meets_target) best = rows.front();
    fastest = *std::min_element(rows.begin(), rows.end(), [](const ServeRow& a, const ServeRow& b) {
      return a.cost.latency_per_token < b.cost.latency_per_token;
    });
  };
  pick(out.prefill, out.best_prefill, out.fastest_prefill);
  pick(out.decode, out.best_decode, out.fastest_decode);
  return out;
}

}  // namespace tessel::plan
