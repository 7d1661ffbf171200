// SPDX-License-Identifier: Apache-2.0
#include "tessel/nn/moe_routing.h"

#include <algorithm>
#include <numeric>

#include "tessel/core/error.h"

namespace tessel::nn {

Routing route_tokens(std::span<const double> probs, int64_t tokens, const MoEConfig& config) {
  const int64_t e_count = config.num_experts, k = config.top_k;
  TESSEL_CHECK(int64_t(probs.size()) == tokens * e_count, "moe routing: ", probs.size(),
               " probabilities for ", tokens, " tokens x ", e_count, " experts");
  Routing r;
  r.tokens = tokens;
  r.top_k = k;
  r.experts = e_count;
  r.capacity = config.drop_tokens ? config.capacity(tokens) : 0;
  r.choice.resize(size_t(tokens * k));
  std::vector<int64_t> order(static_cast<size_t>(e_count));
  for (int64_t t = 0; t < tokens; ++t) {
    const double* p = probs.data() + t * e_count;
    std::iota(order.begin(), order.end(), int64_t(0));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    std::copy(order.begin(), order.begin() + k, r.choice.begin() + t * k);
  }

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
  return r;
}

}  // namespace tessel::nn
