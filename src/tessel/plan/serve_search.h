// SPDX-License-Identifier: Apache-2.0
// Serving plans (`tessel plan --serve`): every layout of plan/serve_cost.h on the cluster's chips
// (1D weight-stationary with heads- or batch-sharded attention, 2D weight-stationary at its best
// X, weight-gathered, tessel's pipeline stages) at every batch from 1 to the largest the memory
// holds, for prefill and for decode separately, ranked as Pope et al. 2022 trade them: the lowest
// cost per token (chip-seconds) among those that meet the latency target. docs/PLANNER.md,
// "Serving plans".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/plan/serve_cost.h"

namespace tessel::plan {

struct ServeRequest {
  ServeShape shape;
  ServeWorkload workload;  // prompt, context, capacity and dtypes; phase and batch are searched
  int devices = 1;         // the most chips a plan may use (any divisor of it is tried)
  std::vector<int64_t> batches;       // empty: 1, 2, 4, ... up to the largest that fits
  double decode_latency_target = 0;   // seconds per decoded token; 0: none
  double prefill_latency_target = 0;  // seconds per prefill step; 0: none
  // Whether tessel can split the model over `tp` ranks (the family's plan), with the reason
  // when not; empty: any split the heads allow.
  std::function<std::string(int tp)> tp_refusal;
  TpWeightCount tp_weights;  // exact weights of a 1D rank (serve_cost.h)
  ServeMemoryFn memory;      // traced serving memory of a 1D rank (serve_memory.h)
  const models::ModelConfig* config = nullptr;
};

struct ServeRow {
  ServePhase phase = ServePhase::Decode;
  ServeLayout layout;
  int64_t batch = 1;
  ServeCost cost;
  bool meets_target = true;
  std::string not_runnable;  // why tessel cannot run it ("" when it can)
};

struct ServePlans {
  std::vector<ServeRow> prefill, decode;  // ranked, fitting rows only
  // The best row of each phase that meets its target (nullopt: none does; then the fastest row
  // is `fastest_*`).
  std::optional<ServeRow> best_prefill, best_decode;
  std::optional<ServeRow> fastest_prefill, fastest_decode;
};

ServePlans search_serve(const Cluster& cluster, const ServeRequest& request);

}  // namespace tessel::plan
