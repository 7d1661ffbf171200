// SPDX-License-Identifier: Apache-2.0
// The plan search's offloaded layouts (docs/PLANNER.md, "Offload in the search"): a layout whose
// ranks do not fit the device, planned again with its training state in chunks over the memory
// tiers (plan/offload_model.h), the budgets chosen from what the step leaves of the device's
// memory. Internal to plan/search.cpp.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessel/plan/search.h"

namespace tessel::plan {

// One rank's offload input, kept by what changes it (dp, ZeRO stage, tp, the pipeline rank and
// micro-batches, precision): the search asks for the same rank under many recompute modes and
// micro-batch sizes. With it, what a replay with every chunk in the device tier found: the chunk
// size and the state the chunks take over, or why the model refuses the rank.
struct OffloadRank {
  OffloadInput input;
  int64_t chunk_bytes = 0, state_bytes = 0;
  std::string refused;
};
using OffloadInputs = std::map<std::string, OffloadRank>;

// `r` (predicted, out of memory; `memories[p]` pipeline rank p's estimate) offloaded if the
// request allows it and the tiers can hold the step: then ranked with the budgets in its layout,
// the steady traffic and the step time max(compute, NVMe time); otherwise its reason says why not.
void offload_layout(const models::ModelConfig& config, const Cluster& cluster,
                    const SearchRequest& request, const std::vector<MemoryEstimate>& memories,
                    OffloadInputs& inputs, PlanResult& r);

}  // namespace tessel::plan
