// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/compute_cost.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/plan/kernel_curve.h"
#include "tessel/plan/unfused_attention.h"

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

// The kernel's measured time at `index` (roofline seconds) for a call whose first input is in
// `dtype`, or -1 when it was not calibrated. The dtype's own points when calibration measured
// any, else the f32 ones. `warm`: the curve of the in-cache times, when every point of it has
// one (else the evicted curve).
double measured_kernel_seconds(const Cluster& cluster, std::string_view kernel,
                               std::string_view dtype, double index, bool warm = false) {
  const bool own =
      std::any_of(cluster.kernels.begin(), cluster.kernels.end(),
                  [&](const KernelPoint& p) { return p.kernel == kernel && p.dtype == dtype; });
  const std::string_view use = own ? dtype : std::string_view("f32");
  std::vector<std::pair<double, double>> curve;
  for (const KernelPoint& p : cluster.kernels)
    if (p.kernel == kernel && p.dtype == use) {
      if (warm && p.warm_seconds <= 0)
        return measured_kernel_seconds(cluster, kernel, dtype, index);
      curve.emplace_back(roofline_index(cluster, p.flops, p.bytes),
                         warm ? p.warm_seconds : p.seconds);
    }
  if (curve.empty() || index <= 0) return -1;
  return curve_at(std::move(curve), index);
}

}  // namespace

OpTime op_time(const Cluster& cluster, const OpNode& op, double cache_hit) {
  OpTime t;
  t.cache_hit = std::clamp(cache_hit, 0.0, 1.0);
  const std::string dtype = peak_dtype(cluster, op);
  const double peak = cluster.peak_flops(dtype);
  const bool gemm = op.kernel == "gemm" && op.cost.matmul_flops > 0;
  // Unfused attention's products at a GEMM's rate for one head's score product; its kernels run
  // one after another, the products compute-bound and the softmax between them bandwidth-bound,
  // so their times add (unfused_attention.h).
  const bool unfused = is_unfused_attention(op);
  // A kernel's curve is its first input's dtype's (other dtypes fall back to f32's).
  const std::string_view op_dtype = op.inputs.empty() ? "f32" : dtype_name(op.inputs.front().dtype);
  const double bytes = op.cost.bytes_read + op.cost.bytes_written;
  t.memory_seconds = bytes / cluster.device.memory_bandwidth;
  // The kernel's time with its operands evicted (warm = false) or in cache.
  auto kernel_time = [&](bool warm, OpTime& into) {
    double rate = peak;
    if (gemm) {
      const GemmShape g = gemm_shape(op);
      const bool known = std::find(std::begin(kGemmLayouts), std::end(kGemmLayouts),
                                   std::string_view(op.detail)) != std::end(kGemmLayouts);
      // A batched product runs as b products of its own shape; the table has the plain ones.
      into.efficiency = cluster.gemm_efficiency(dtype, g.m, g.n, std::max<int64_t>(g.k, 1),
                                                known ? std::string_view(op.detail) : "nn", warm);
      rate *= into.efficiency;
    } else if (unfused) {
      const ScoreShape s = score_shape(op);
      into.efficiency = cluster.gemm_efficiency(dtype, s.s_q, s.s_k, s.d, "nt", warm);
      rate *= into.efficiency;
    }
    into.compute_seconds = op.cost.flops / rate;
    double seconds = unfused ? into.compute_seconds + t.memory_seconds
                             : std::max(into.compute_seconds, t.memory_seconds);
    if (!gemm && !unfused) {
      const double measured = measured_kernel_seconds(
          cluster, op.kernel, op_dtype, roofline_index(cluster, op.cost.flops, bytes), warm);
      if (measured >= 0) {
        seconds = measured;
        into.calibrated = true;
      }
    }
    return seconds;
  };
  t.kernel_seconds = kernel_time(false, t);
  if (t.cache_hit > 0) {
    OpTime warm;
    const double warm_seconds = kernel_time(true, warm);
    t.kernel_seconds += t.cache_hit * (warm_seconds - t.kernel_seconds);
    t.compute_seconds += t.cache_hit * (warm.compute_seconds - t.compute_seconds);
    t.efficiency += t.cache_hit * (warm.efficiency - t.efficiency);
  }
  // Outside the kernel: a fixed cost per op and the part that grows with what it writes (its
  // output allocated and first touched, the host-side copies).
  t.overhead_seconds =
      cluster.device.op_overhead + cluster.device.op_overhead_per_byte * op.cost.bytes_written;
  t.seconds = t.kernel_seconds + t.overhead_seconds;
  return t;
}

std::vector<double> cache_hit_fractions(const std::vector<OpNode>& ops, double cache_bytes) {
  std::vector<double> hits(ops.size(), 0.0);
  if (cache_bytes <= 0) return hits;
  // LRU stack distance: the bytes of the distinct storages touched since this one's last touch.
  // Each touch is an event; a Fenwick tree over events holds each storage's bytes at its latest
  // event only, so the sum over the events after a storage's last one counts every storage
  // touched since then once (touching a tensor twice in between does not push it out twice).
  size_t events = 0;
  for (const OpNode& op : ops) events += op.inputs.size() + op.outputs.size();
  std::vector<double> tree(events + 1, 0.0);
  auto add = [&](size_t e, double v) {
    for (size_t i = e + 1; i <= events; i += i & (~i + 1)) tree[i] += v;
  };
  auto prefix = [&](size_t e) {  // the sum over events [0, e)
    double sum = 0;
    for (size_t i = e; i > 0; i -= i & (~i + 1)) sum += tree[i];
    return sum;
  };
  struct Last {
    size_t event;
    double bytes;
  };
  std::unordered_map<const void*, Last> last;
  size_t now = 0;
  auto touch = [&](const kernels::TensorDesc& t) {
    const size_t e = now++;
    if (!t.storage) return;
    auto it = last.find(t.storage);
    if (it != last.end()) add(it->second.event, -it->second.bytes);
    add(e, t.bytes());
    last[t.storage] = Last{e, t.bytes()};
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpNode& op = ops[i];
    const double since = prefix(now);
    double read = 0, found = 0;
    for (const kernels::TensorDesc& in : op.inputs) {
      const double b = in.bytes();
      read += b;
      if (!in.storage) continue;
      const auto it = last.find(in.storage);
      if (it == last.end()) continue;
      const double distance = since - prefix(it->second.event + 1);
      if (distance + b <= cache_bytes) found += b;
    }
    hits[i] = read > 0 ? found / read : 0.0;
    for (const kernels::TensorDesc& in : op.inputs) touch(in);
    for (const kernels::TensorDesc& out : op.outputs) touch(out);
  }
  return hits;
}

ComputeTime graph_compute_time(const Cluster& cluster, const Graph& graph) {
  ComputeTime c;
  const std::vector<double> hits =
      cache_hit_fractions(graph.ops, double(cluster.device.cache_bytes));
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const OpNode& op = graph.ops[i];
    const OpTime t = op_time(cluster, op, hits[i]);
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
        cluster, "adamw", "f32", roofline_index(cluster, flops / tensors, bytes / tensors));
    if (each >= 0) return tensors * (each + cluster.device.op_overhead);
  }
  return std::max(flops / cluster.peak_flops("f32"), bytes / cluster.device.memory_bandwidth);
}

double gradient_passes_seconds(const Cluster& cluster, double elements) {
  const double norm_bytes = 4 * elements, scale_bytes = 8 * elements;
  return (norm_bytes + scale_bytes) / cluster.device.memory_bandwidth;
}

}  // namespace tessel::plan
