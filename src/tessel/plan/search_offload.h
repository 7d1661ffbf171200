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

// The offload model's inputs by what changes them (dp, ZeRO stage, tp, the pipeline rank and
// micro-batches, precision): the search asks for the same rank under many recompute modes and
// micro-batch sizes.
using OffloadInputs = std::map<std::string, OffloadInput>;

// `r` (predicted, out of memory; `memories[p]` pipeline rank p's estimate) offloaded if the
// request allows it and the tiers can hold the step: then ranked with the budgets in its layout,
// the steady traffic and the step time max(compute, NVMe time); otherwise its reason says why not.
void offload_layout(const models::ModelConfig& config, const Cluster& cluster,
                    const SearchRequest& request, const std::vector<MemoryEstimate>& memories,
                    OffloadInputs& inputs, PlanResult& r);

// One rank's host tier when the request gives none: five chunks, the longest row the step holds
// there (an update's parameter, gradient, both moments and a 16-bit copy).
int64_t default_offload_host_bytes(int64_t chunk_bytes);

}  // namespace tessel::plan
