// SPDX-License-Identifier: Apache-2.0
// Recomputation finer than one mode for a layout (search_recompute.h).
#include "tessel/plan/search_recompute.h"

#include <algorithm>

#include "tessel/plan/trace.h"

namespace tessel::plan {

std::vector<nn::Recompute> least_fitting_modes(const PeaksByMode& peaks, int pp, double memory) {
  std::vector<nn::Recompute> modes;
  for (int r = 0; r < pp; ++r) {
    const auto fits = std::find_if(peaks.begin(), peaks.end(), [&](const auto& mode_peaks) {
      const std::vector<double>& p = mode_peaks.second;
      return int(p.size()) == pp && p[size_t(r)] <= memory;
    });
    if (fits == peaks.end()) return {};
    modes.push_back(fits->first);
  }
  return modes;
}

std::vector<nn::Recompute> least_recompute_per_rank(const PeaksByMode& peaks, int pp,
                                                    double memory) {
  const std::vector<nn::Recompute> modes = least_fitting_modes(peaks, pp, memory);
  if (modes.empty()) return {};
  if (std::all_of(modes.begin(), modes.end(), [&](nn::Recompute m) { return m == modes[0]; }))
    return {};
  return modes;
}

int64_t rank_block_count(const models::ModelConfig& config, const SearchRequest& request,
                         const Layout& l, int r) {
  if (l.pp == 1) return config.num_layers();
  return int64_t(rank_blocks(memory_layout(l, request, r).pipeline, config.num_layers()).size());
}

Layout with_block_recompute(Layout l, const std::vector<nn::Recompute>& modes,
                            const std::vector<int64_t>& counts, const std::vector<int64_t>& blocks,
                            const std::vector<nn::Recompute>& rests) {
  std::vector<int64_t> n(counts.size());
  std::vector<nn::Recompute> rest(counts.size(), nn::Recompute::None);
  bool any_rest = false;
  for (size_t r = 0; r < counts.size(); ++r) {
    n[r] = modes[r] == nn::Recompute::None || counts[r] >= blocks[r] ? nn::kAllBlocks : counts[r];
    if (n[r] != nn::kAllBlocks) rest[r] = rests[r];
    any_rest = any_rest || rest[r] != nn::Recompute::None;
  }
  if (l.pp == 1) {
    l.recompute = modes[0];
    l.rank_recompute.clear();
  } else {
    l.rank_recompute = modes;
  }
  l.recompute_blocks = n;
  l.recompute_rest.clear();
  if (any_rest) l.recompute_rest = rest;
  return l;
}

std::optional<PlanResult> fewest_recomputed_blocks(
    const models::ModelConfig& config, const SearchRequest& request, const Layout& l,
    const PeaksByMode& peaks, double memory,
    const std::function<PlanResult(const Layout&)>& predict, nn::Recompute rest) {
  const int pp = l.pp;
  const std::vector<nn::Recompute> modes = least_fitting_modes(peaks, pp, memory);
  if (modes.empty()) return std::nullopt;
  const size_t n = size_t(pp);
  std::vector<nn::Recompute> rests(n, nn::Recompute::None);
  for (size_t r = 0; r < n; ++r)
    if (modes[r] > rest) rests[r] = rest;
  if (rest != nn::Recompute::None &&
      std::none_of(rests.begin(), rests.end(), [&](nn::Recompute m) { return m == rest; }))
    return std::nullopt;
  std::vector<int64_t> blocks(n, 0), lo(n, 0), hi(n, 0);
  for (int r = 0; r < pp; ++r) {
    blocks[size_t(r)] = hi[size_t(r)] = rank_block_count(config, request, l, r);
    if (modes[size_t(r)] == nn::Recompute::None) lo[size_t(r)] = hi[size_t(r)];
  }
  std::vector<int64_t> counts = hi;
  for (;;) {
    bool open = false;
    for (size_t r = 0; r < size_t(pp); ++r) {
      open = open || hi[r] - lo[r] > 1;
      counts[r] = hi[r] - lo[r] > 1 ? (lo[r] + hi[r]) / 2 : hi[r];
    }
    if (!open) break;
    const PlanResult probe = predict(with_block_recompute(l, modes, counts, blocks, rests));
    const std::vector<double> rank_peaks =
        pp == 1 ? std::vector<double>{probe.memory.peak()} : probe.rank_peaks;
    for (size_t r = 0; r < size_t(pp); ++r)
      if (hi[r] - lo[r] > 1) (rank_peaks.at(r) <= memory ? hi[r] : lo[r]) = counts[r];
  }
  // With a rest, only a rank that gives some blocks the rest makes a layout the search without
  // one does not meet.
  bool fewer = false;
  for (size_t r = 0; r < size_t(pp); ++r)
    fewer = fewer || (modes[r] != nn::Recompute::None && hi[r] < blocks[r] &&
                      (rest == nn::Recompute::None || rests[r] == rest));
  if (!fewer) return std::nullopt;
  return predict(with_block_recompute(l, modes, hi, blocks, rests));
}

}  // namespace tessel::plan
