// SPDX-License-Identifier: Apache-2.0
// Sums over the traced graph: by phase, by module (own ops, or with the submodules').
#include "tessel/plan/graph.h"

#include "tessel/core/error.h"

namespace tessel::plan {

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::Forward:
      return "forward";
    case Phase::Backward:
      return "backward";
    case Phase::Recompute:
      return "recompute";
  }
  TESSEL_FAIL("phase_name: unknown phase ", int(phase));
}

void Cost::add(const Cost& o) {
  flops += o.flops;
  matmul_flops += o.matmul_flops;
  bytes_read += o.bytes_read;
  bytes_written += o.bytes_written;
  ops += o.ops;
}

Cost Graph::total() const {
  Cost c;
  for (const OpNode& op : ops) c.add(op.cost);
  return c;
}

Cost Graph::phase_total(Phase phase) const {
  Cost c;
  for (const OpNode& op : ops)
    if (op.phase == phase) c.add(op.cost);
  return c;
}

std::vector<Cost> Graph::module_costs(bool inclusive, int phase) const {
  std::vector<Cost> out(modules.size());
  for (const OpNode& op : ops) {
    if (phase >= 0 && int(op.phase) != phase) continue;
    for (int m = op.module; m >= 0; m = modules[size_t(m)].parent) {
      out[size_t(m)].add(op.cost);
      if (!inclusive) break;
    }
  }
  return out;
}

std::vector<double> Graph::module_saved_bytes_inclusive() const {
  std::vector<double> out(modules.size(), 0.0);
  for (size_t i = 0; i < saved_bytes_by_module.size(); ++i)
    for (int m = int(i); m >= 0; m = modules[size_t(m)].parent)
      out[size_t(m)] += saved_bytes_by_module[i];
  return out;
}

int Graph::depth(int module) const {
  int d = 0;
  for (int m = modules[size_t(module)].parent; m >= 0; m = modules[size_t(m)].parent) ++d;
  return d;
}

}  // namespace tessel::plan
