// SPDX-License-Identifier: Apache-2.0
// Cluster's queries and its TOML writer (the reader is cluster_reader.cpp).
#include "tessel/plan/cluster.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "tessel/core/error.h"
#include "tessel/plan/kernel_curve.h"

namespace tessel::plan {

size_t peak_dtype_index(std::string_view dtype) {
  for (size_t i = 0; i < std::size(kPeakDtypes); ++i)
    if (kPeakDtypes[i] == dtype) return i;
  TESSEL_FAIL("cluster description: unknown dtype '", dtype,
              "' (known: f32, tf32, bf16, f16, int8)");
}

int Cluster::node_of(int rank) const {
  TESSEL_CHECK(rank >= 0 && rank < num_devices(), source, ": rank ", rank, " is not one of the ",
               num_devices(), " devices (", nodes, " nodes x ", devices_per_node, ")");
  return rank / devices_per_node;
}

const LinkSpec& Cluster::link(bool across_nodes) const {
  const std::optional<LinkSpec>& l = across_nodes ? inter_node : intra_node;
  TESSEL_CHECK(l.has_value(), source, ": no [links.", across_nodes ? "inter_node" : "intra_node",
               "] table, and a group of ranks crosses ", across_nodes ? "nodes" : "devices", " (",
               nodes, " nodes x ", devices_per_node, " devices)");
  return *l;
}

double Cluster::peak_flops(std::string_view dtype) const {
  const double v = device.peak_flops.at(peak_dtype_index(dtype));
  TESSEL_CHECK(v > 0, source, ": device.peak_flops.", dtype, " is not given for ", device.kind);
  return v;
}

double Cluster::gemm_efficiency(std::string_view dtype, int64_t m, int64_t n, int64_t k,
                                std::string_view layout, bool warm) const {
  const double peak = peak_flops(dtype);
  auto has_layout = [&](std::string_view l) {
    return std::any_of(gemm.begin(), gemm.end(),
                       [&](const GemmPoint& p) { return p.dtype == dtype && p.layout == l; });
  };
  const std::string_view use = has_layout(layout) ? layout : std::string_view("nn");
  std::vector<const GemmPoint*> points;
  for (const GemmPoint& p : gemm)
    if (p.dtype == dtype && p.layout == use) points.push_back(&p);
  if (points.empty()) return 1.0;
  // One table or the other, never a mix: a warm grid with holes would interpolate across both.
  warm = warm && std::all_of(points.begin(), points.end(),
                             [](const GemmPoint* p) { return p->warm_flops > 0; });
  auto rate = [&](const GemmPoint* p) { return warm ? p->warm_flops : p->flops; };
  std::vector<GemmSample> samples;
  for (const GemmPoint* p : points)
    samples.push_back({double(p->m), double(p->n), double(p->k), rate(p)});
  if (const auto rate =
          gemm_rate_on_grid(samples, double(std::max<int64_t>(m, 1)),
                            double(std::max<int64_t>(n, 1)), double(std::max<int64_t>(k, 1))))
    return std::min(1.0, *rate / peak);
  const GemmPoint* best = nullptr;
  double best_d = std::numeric_limits<double>::infinity();
  auto lg = [](int64_t x) { return std::log2(double(std::max<int64_t>(x, 1))); };
  for (const GemmPoint* p : points) {
    const double d =
        std::abs(lg(p->m) - lg(m)) + std::abs(lg(p->n) - lg(n)) + std::abs(lg(p->k) - lg(k));
    if (d < best_d) best_d = d, best = p;
  }
  return std::min(1.0, rate(best) / peak);
}

std::vector<KernelPoint> Cluster::kernel_points(std::string_view kernel) const {
  std::vector<KernelPoint> out;
  for (const KernelPoint& p : kernels)
    if (p.kernel == kernel) out.push_back(p);
  return out;
}

const CollectiveFit* Cluster::measured_collective(std::string_view op, int ranks) const {
  for (const CollectiveFit& f : collectives)
    if (f.op == op && f.ranks == ranks) return &f;
  return nullptr;
}

Cluster Cluster::with_devices(int devices) const {
  TESSEL_CHECK(devices >= 1, source, ": a plan needs at least one device, got ", devices);
  Cluster c = *this;
  if (devices <= devices_per_node) {
    c.devices_per_node = devices;
    c.nodes = 1;
    // Part of a torus is not a torus of its dimensions: the switched model stands in for it.
    if (devices < devices_per_node && c.intra_node) c.intra_node->torus.clear();
    return c;
  }
  TESSEL_CHECK(devices % devices_per_node == 0, source, ": ", devices, " devices are not a whole ",
               "number of nodes of ", devices_per_node);
  c.nodes = devices / devices_per_node;
  link(true);  // throws when the description cannot connect nodes
  return c;
}

namespace {

// The shortest text that reads back to the same double, so to_toml() round-trips exactly. What
// std::to_chars writes ("3e+11", "1.5e-06", "0.25", "300") is valid TOML.
std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += char(ch);
    } else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += char(ch);
    }
  }
  return out + "\"";
}

}  // namespace

std::string Cluster::to_toml() const {
  std::ostringstream out;
  out << "# Cluster description (docs/PLANNER.md, \"Cluster descriptions\"). Units: bytes, "
         "seconds, FLOP/s.\n";
  out << "name = " << quoted(name) << "\n";
  out << "devices_per_node = " << devices_per_node << "\n";
  out << "nodes = " << nodes << "\n\n";
  out << "[device]\nkind = " << quoted(device.kind) << "\n";
  out << "memory_bytes = " << device.memory_bytes << "\n";
  out << "memory_bandwidth = " << num(device.memory_bandwidth) << "  # bytes/s\n";
  if (device.op_overhead > 0)
    out << "op_overhead = " << num(device.op_overhead) << "  # s per op outside its kernel\n";
  if (device.op_overhead_per_byte > 0)
    out << "op_overhead_per_byte = " << num(device.op_overhead_per_byte)
        << "  # s per byte an op writes, outside its kernel\n";
  if (device.cpu_share < 1)
    out << "cpu_share = " << num(device.cpu_share) << "  # of the wall clock, under load\n";
  if (device.cache_bytes > 0)
    out << "cache_bytes = " << device.cache_bytes << "  # private caches of a rank's cores\n";
  out << "\n";
  out << "[device.peak_flops]  # dense FLOP/s\n";
  for (size_t i = 0; i < std::size(kPeakDtypes); ++i)
    if (device.peak_flops.size() > i && device.peak_flops[i] > 0)
      out << kPeakDtypes[i] << " = " << num(device.peak_flops[i]) << "\n";
  auto link_table = [&](const char* name, const LinkSpec& l) {
    out << "\n[links." << name << "]  # per device, per direction\n";
    out << "bandwidth = " << num(l.bandwidth) << "  # bytes/s\n";
    out << "latency = " << num(l.latency) << "  # s\n";
    if (l.efficiency != 1)
      out << "efficiency = " << num(l.efficiency) << "  # of the bandwidth, after the protocol\n";
    if (!l.torus.empty()) {
      out << "torus = [";
      for (size_t i = 0; i < l.torus.size(); ++i) out << (i ? ", " : "") << l.torus[i];
      out << "]\n";
    }
  };
  if (intra_node) link_table("intra_node", *intra_node);
  if (inter_node) link_table("inter_node", *inter_node);
  if (storage)
    out << "\n[storage]  # the disk memory offload swaps to\nread_bandwidth = "
        << num(storage->read_bandwidth)
        << "  # bytes/s\nwrite_bandwidth = " << num(storage->write_bandwidth) << "  # bytes/s\n";
  for (const GemmPoint& p : gemm)
    out << "\n[[gemm]]\ndtype = " << quoted(p.dtype) << "\nm = " << p.m << "\nn = " << p.n
        << "\nk = " << p.k << "\nflops = " << num(p.flops) << "\n"
        << (p.layout == "nn" ? std::string() : "layout = " + quoted(p.layout) + "\n")
        << (p.warm_flops > 0 ? "warm_flops = " + num(p.warm_flops) + "\n" : std::string());
  for (const KernelPoint& p : kernels)
    out << "\n[[kernel]]\nname = " << quoted(p.kernel) << "\nbytes = " << num(p.bytes)
        << "\nflops = " << num(p.flops) << "\nseconds = " << num(p.seconds) << "\n"
        << (p.warm_seconds > 0 ? "warm_seconds = " + num(p.warm_seconds) + "\n" : std::string())
        << (p.dtype == "f32" ? std::string() : "dtype = " + quoted(p.dtype) + "\n");
  for (const CollectiveFit& f : collectives)
    out << "\n[[collective]]  # t = alpha + beta * bytes\nop = " << quoted(f.op)
        << "\nranks = " << f.ranks << "\nalpha = " << num(f.alpha) << "\nbeta = " << num(f.beta)
        << "\n";
  return out.str();
}

}  // namespace tessel::plan
