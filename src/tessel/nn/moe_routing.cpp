// SPDX-License-Identifier: Apache-2.0
#include "tessel/nn/moe_routing.h"

#include <algorithm>
#include <numeric>

#include "tessel/core/error.h"

namespace tessel::nn {

namespace {

// Admission and grouping from r.choice (filled): the capacity, GShard's priority order, rows
// grouped by expert.
void admit(Routing& r, const MoEConfig& config) {
  const int64_t e_count = r.experts, k = r.top_k, tokens = r.tokens;
  r.capacity = config.drop_tokens ? config.capacity(tokens) : 0;
  // Admission in priority order (choice rank, then token); slot = place within the expert.
  r.routed.assign(size_t(e_count), 0);
  r.first_choice_count.assign(size_t(e_count), 0);
  r.kept.assign(size_t(tokens * k), 0);
  std::vector<int64_t> slot(size_t(tokens * k), -1), filled(size_t(e_count), 0);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t e = r.choice[size_t(t * k + j)];
      ++r.routed[size_t(e)];
      if (j == 0) ++r.first_choice_count[size_t(e)];
      if (r.capacity > 0 && filled[size_t(e)] >= r.capacity) continue;
      slot[size_t(t * k + j)] = filled[size_t(e)]++;
      r.kept[size_t(t * k + j)] = 1;
    }

  r.offsets.assign(size_t(e_count + 1), 0);
  for (int64_t e = 0; e < e_count; ++e)
    r.offsets[size_t(e + 1)] = r.offsets[size_t(e)] + filled[size_t(e)];
  const int64_t rows = r.offsets[size_t(e_count)];
  r.source.assign(size_t(rows), 0);
  r.expert_of_row.assign(size_t(rows), 0);
  r.row.assign(size_t(tokens * k), -1);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const size_t i = size_t(t * k + j);
      if (!r.kept[i]) continue;
      const int64_t e = r.choice[i], at = r.offsets[size_t(e)] + slot[i];
      r.row[i] = at;
      r.source[size_t(at)] = t;
      r.expert_of_row[size_t(at)] = e;
    }
}

}  // namespace

Routing route_tokens(std::span<const double> probs, int64_t tokens, const MoEConfig& config) {
  const int64_t e_count = config.num_experts, k = config.top_k;
  TESSEL_CHECK(int64_t(probs.size()) == tokens * e_count, "moe routing: ", probs.size(),
               " probabilities for ", tokens, " tokens x ", e_count, " experts");
  Routing r;
  r.tokens = tokens;
  r.top_k = k;
  r.experts = e_count;
  r.choice.resize(size_t(tokens * k));
  std::vector<int64_t> order(static_cast<size_t>(e_count));
  for (int64_t t = 0; t < tokens; ++t) {
    const double* p = probs.data() + t * e_count;
    std::iota(order.begin(), order.end(), int64_t(0));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    std::copy(order.begin(), order.begin() + k, r.choice.begin() + t * k);
  }

  admit(r, config);
  return r;
}

Routing route_piece(const std::vector<int64_t>& whole_choices, int64_t whole_tokens,
                    const std::vector<int64_t>& positions, const MoEConfig& config,
                    Routing* whole_out) {
  const int64_t e_count = config.num_experts, k = config.top_k;
  TESSEL_CHECK(int64_t(whole_choices.size()) == whole_tokens * k,
               "moe routing: ", whole_choices.size(), " choices for ", whole_tokens,
               " tokens x top-", k);
  Routing whole;
  whole.tokens = whole_tokens;
  whole.top_k = k;
  whole.experts = e_count;
  whole.choice = whole_choices;
  admit(whole, config);

  Routing r;
  r.tokens = int64_t(positions.size());
  r.top_k = k;
  r.experts = e_count;
  r.capacity = whole.capacity;
  r.routed = whole.routed;
  r.first_choice_count = whole.first_choice_count;
  r.piece = true;
  r.choice.resize(size_t(r.tokens * k));
  r.kept.assign(size_t(r.tokens * k), 0);
  r.row.assign(size_t(r.tokens * k), -1);
  // The piece's kept pairs in the whole call's row order: grouped by expert, priority order
  // within each, as one process lays them out.
  std::vector<std::pair<int64_t, int64_t>> rows;  // (whole row, local pair)
  for (int64_t t = 0; t < r.tokens; ++t) {
    const int64_t at = positions[size_t(t)];
    TESSEL_CHECK(at >= 0 && at < whole_tokens, "moe routing: piece token ", t, " at ", at,
                 " outside the call's ", whole_tokens, " tokens");
    for (int64_t j = 0; j < k; ++j) {
      const size_t w = size_t(at * k + j), i = size_t(t * k + j);
      r.choice[i] = whole.choice[w];
      r.kept[i] = whole.kept[w];
      if (whole.kept[w]) rows.emplace_back(whole.row[w], int64_t(i));
    }
  }
  std::sort(rows.begin(), rows.end());
  r.offsets.assign(size_t(e_count + 1), 0);
  r.source.resize(rows.size());
  r.expert_of_row.resize(rows.size());
  for (size_t n = 0; n < rows.size(); ++n) {
    const int64_t i = rows[n].second, e = r.choice[size_t(i)];
    r.row[size_t(i)] = int64_t(n);
    r.source[n] = i / k;
    r.expert_of_row[n] = e;
    ++r.offsets[size_t(e + 1)];
  }
  for (int64_t e = 0; e < e_count; ++e) r.offsets[size_t(e + 1)] += r.offsets[size_t(e)];
  if (whole_out != nullptr) *whole_out = std::move(whole);
  return r;
}

}  // namespace tessel::nn
