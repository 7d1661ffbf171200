// SPDX-License-Identifier: Apache-2.0
// JSON form of a traced graph (see graph_json.h).
#include "tessel/plan/graph_json.h"

#include <nlohmann/json.hpp>

namespace tessel::plan {

namespace {

nlohmann::json cost_json(const Cost& c) {
  return {{"flops", c.flops},
          {"matmul_flops", c.matmul_flops},
          {"bytes_read", c.bytes_read},
          {"bytes_written", c.bytes_written},
          {"ops", c.ops}};
}

nlohmann::json tensors_json(const std::vector<kernels::TensorDesc>& tensors) {
  nlohmann::json out = nlohmann::json::array();
  for (const kernels::TensorDesc& t : tensors)
    out.push_back({{"shape", std::vector<int64_t>(t.shape.dims().begin(), t.shape.dims().end())},
                   {"dtype", std::string(dtype_name(t.dtype))}});
  return out;
}

}  // namespace

std::string graph_json(const Graph& g, const GraphJsonOptions& options) {
  nlohmann::json out;
  nlohmann::json totals;
  for (int p = 0; p < kNumPhases; ++p)
    totals[std::string(phase_name(Phase(p)))] = cost_json(g.phase_total(Phase(p)));
  totals["step"] = cost_json(g.total());
  out["totals"] = totals;
  out["saved_activation_bytes"] = g.saved_bytes;
  out["parameter_count"] = g.parameter_count;
  out["parameter_bytes"] = g.parameter_bytes;

  std::vector<std::vector<Cost>> self(kNumPhases), inclusive(kNumPhases);
  for (int p = 0; p < kNumPhases; ++p) {
    self[size_t(p)] = g.module_costs(false, p);
    inclusive[size_t(p)] = g.module_costs(true, p);
  }
  const std::vector<double> saved = g.module_saved_bytes_inclusive();
  nlohmann::json modules = nlohmann::json::array();
  for (size_t m = 0; m < g.modules.size(); ++m) {
    const int depth = g.depth(int(m));
    if (options.max_depth >= 0 && depth > options.max_depth) continue;
    nlohmann::json j = {{"path", g.modules[m].path},
                        {"type", g.modules[m].type},
                        {"depth", depth},
                        {"saved_activation_bytes", saved[m]}};
    for (int p = 0; p < kNumPhases; ++p) {
      const std::string phase(phase_name(Phase(p)));
      j[phase] = cost_json(inclusive[size_t(p)][m]);
      j[phase + "_self"] = cost_json(self[size_t(p)][m]);
    }
    modules.push_back(std::move(j));
  }
  out["modules"] = std::move(modules);

  if (options.ops) {
    nlohmann::json ops = nlohmann::json::array();
    for (const OpNode& op : g.ops) {
      ops.push_back({{"kernel", op.kernel},
                     {"detail", op.detail},
                     {"phase", std::string(phase_name(op.phase))},
                     {"module", op.module >= 0 ? g.modules[size_t(op.module)].path : ""},
                     {"inputs", tensors_json(op.inputs)},
                     {"outputs", tensors_json(op.outputs)},
                     {"producers", op.producers},
                     {"cost", cost_json(op.cost)}});
    }
    out["ops"] = std::move(ops);
  }
  return out.dump();
}

}  // namespace tessel::plan
