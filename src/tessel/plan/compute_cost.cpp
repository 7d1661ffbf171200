// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/compute_cost.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/error.h"

namespace tessel::plan {

GemmShape gemm_shape(const OpNode& op) {
  TESSEL_CHECK(!op.outputs.empty(), "gemm_shape: op '", op.kernel, "' has no output");
  const Shape& out = op.outputs.front().shape;
  TESSEL_CHECK(out.ndim() >= 2, "gemm_shape: output of '", op.kernel, "' has rank ", out.ndim(),
               ", expected >= 2");
  GemmShape g;
  g.n = out[-1];
  g.m = out[-2];
  for (int i = 0; i + 2 < out.ndim(); ++i) g.batch *= out[i];
  const double bmn = double(g.batch) * double(g.m) * double(g.n);
  g.k = bmn > 0 ? int64_t(std::llround(op.cost.matmul_flops / (2 * bmn))) : 0;
  return g;
}

std::string peak_dtype(const Cluster& cluster, const OpNode& op) {
  if (op.inputs.empty()) return "f32";
  const DType d = op.inputs.front().dtype;
  const char* name = d == DType::BF16 ? "bf16" : d == DType::F16 ? "f16" : "f32";
  if (std::string_view(name) != "f32" && cluster.device.peak_flops[peak_dtype_index(name)] <= 0)
    return "f32";
  return name;
}

OpTime op_time(const Cluster& cluster, const OpNode& op) {
  OpTime t;
  const std::string dtype = peak_dtype(cluster, op);
  double peak = cluster.peak_flops(dtype);
  if (op.kernel == "gemm" && op.cost.matmul_flops > 0) {
    const GemmShape g = gemm_shape(op);
    // A batched product runs as b products of its own shape; the table has the plain ones.
    t.efficiency = cluster.gemm_efficiency(dtype, g.m, g.n, std::max<int64_t>(g.k, 1));
    peak *= t.efficiency;
  }
  t.compute_seconds = op.cost.flops / peak;
  t.memory_seconds = (op.cost.bytes_read + op.cost.bytes_written) / cluster.device.memory_bandwidth;
  t.seconds = std::max(t.compute_seconds, t.memory_seconds);
  return t;
}

ComputeTime graph_compute_time(const Cluster& cluster, const Graph& graph) {
  ComputeTime c;
  for (const OpNode& op : graph.ops) {
    const double s = op_time(cluster, op).seconds;
    c.seconds[size_t(op.phase)] += s;
    (op.kernel == "gemm" ? c.gemm_seconds : c.other_seconds) += s;
  }
  return c;
}

double adamw_seconds(const Cluster& cluster, double elements) {
  return std::max(12 * elements / cluster.peak_flops("f32"),
                  28 * elements / cluster.device.memory_bandwidth);
}

}  // namespace tessel::plan
