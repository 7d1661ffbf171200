// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/compute_cost.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/error.h"
#include "tessel/plan/kernel_curve.h"

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

double roofline_index(const Cluster& cluster, double flops, double bytes) {
  return std::max(flops / cluster.peak_flops("f32"), bytes / cluster.device.memory_bandwidth);
}

namespace {

// The kernel's measured time at `index` (roofline seconds), or -1 when it was not calibrated.
double measured_kernel_seconds(const Cluster& cluster, std::string_view kernel, double index) {
  std::vector<std::pair<double, double>> curve;
  for (const KernelPoint& p : cluster.kernels)
    if (p.kernel == kernel)
      curve.emplace_back(roofline_index(cluster, p.flops, p.bytes), p.seconds);
  if (curve.empty() || index <= 0) return -1;
  return curve_at(std::move(curve), index);
}

}  // namespace

OpTime op_time(const Cluster& cluster, const OpNode& op) {
  OpTime t;
  const std::string dtype = peak_dtype(cluster, op);
  double peak = cluster.peak_flops(dtype);
  const bool gemm = op.kernel == "gemm" && op.cost.matmul_flops > 0;
  if (gemm) {
    const GemmShape g = gemm_shape(op);
    const bool known = std::find(std::begin(kGemmLayouts), std::end(kGemmLayouts),
                                 std::string_view(op.detail)) != std::end(kGemmLayouts);
    // A batched product runs as b products of its own shape; the table has the plain ones.
    t.efficiency = cluster.gemm_efficiency(dtype, g.m, g.n, std::max<int64_t>(g.k, 1),
                                           known ? std::string_view(op.detail) : "nn");
    peak *= t.efficiency;
  }
  const double bytes = op.cost.bytes_read + op.cost.bytes_written;
  t.compute_seconds = op.cost.flops / peak;
  t.memory_seconds = bytes / cluster.device.memory_bandwidth;
  t.kernel_seconds = std::max(t.compute_seconds, t.memory_seconds);
  if (!gemm) {
    const double measured =
        measured_kernel_seconds(cluster, op.kernel, roofline_index(cluster, op.cost.flops, bytes));
    if (measured >= 0) {
      t.kernel_seconds = measured;
      t.calibrated = true;
    }
  }
  // Outside the kernel: a fixed cost per op and the part that grows with what it writes (its
  // output allocated and first touched, the host-side copies).
  t.overhead_seconds =
      cluster.device.op_overhead + cluster.device.op_overhead_per_byte * op.cost.bytes_written;
  t.seconds = t.kernel_seconds + t.overhead_seconds;
  return t;
}

ComputeTime graph_compute_time(const Cluster& cluster, const Graph& graph) {
  ComputeTime c;
  for (const OpNode& op : graph.ops) {
    const OpTime t = op_time(cluster, op);
    c.seconds[size_t(op.phase)] += t.seconds;
    c.overhead_seconds += t.overhead_seconds;
    (op.kernel == "gemm" ? c.gemm_seconds : c.other_seconds) += t.seconds;
    c.kernel_seconds[op.kernel] += t.seconds;
  }
  return c;
}

double adamw_seconds(const Cluster& cluster, double elements, double tensors) {
  const double flops = 12 * elements, bytes = 28 * elements;
  if (tensors >= 1 && elements > 0) {
    const double each = measured_kernel_seconds(
        cluster, "adamw", roofline_index(cluster, flops / tensors, bytes / tensors));
    if (each >= 0) return tensors * (each + cluster.device.op_overhead);
  }
  return std::max(flops / cluster.peak_flops("f32"), bytes / cluster.device.memory_bandwidth);
}

double gradient_passes_seconds(const Cluster& cluster, double elements) {
  const double norm_bytes = 4 * elements, scale_bytes = 8 * elements;
  return (norm_bytes + scale_bytes) / cluster.device.memory_bandwidth;
}

}  // namespace tessel::plan
