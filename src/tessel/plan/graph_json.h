// SPDX-License-Identifier: Apache-2.0
// A traced graph as JSON, for `tessel plan trace --json` and for tools outside tessel: totals per
// phase, one entry per module (its own and its subtree's cost per phase, saved activation bytes)
// and, on request, every op with its shapes and producers.
#pragma once

#include <string>

#include "tessel/plan/graph.h"

namespace tessel::plan {

struct GraphJsonOptions {
  int max_depth = -1;  // modules deeper than this are left out (-1: all)
  bool ops = false;    // include every op node
};

std::string graph_json(const Graph& graph, const GraphJsonOptions& options = {});

}  // namespace tessel::plan
