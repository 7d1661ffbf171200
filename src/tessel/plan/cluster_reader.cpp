// SPDX-License-Identifier: Apache-2.0
// Cluster::parse: the schema of a cluster description, checked key by key. Each table lists the
// keys it accepts, so an unknown or misspelt key is refused by name instead of silently ignored
// (a planner fed a default bandwidth would rank plans on numbers nobody wrote).
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "tessel/core/error.h"
#include "tessel/plan/cluster.h"

namespace tessel::plan {

namespace {

std::string describe(const toml::node& node) {
  if (const auto* v = node.as_string()) return "string \"" + v->get() + "\"";
  if (const auto* v = node.as_integer()) return "integer " + std::to_string(v->get());
  if (const auto* v = node.as_floating_point()) {
    std::ostringstream out;
    out << "number " << v->get();
    return out.str();
  }
  if (node.is_boolean()) return "a boolean";
  if (node.is_array()) return "an array";
  return node.is_table() ? "a table" : "a date/time";
}

// Reads one table of the document: every access names the key's full path and the file, and
// finish() refuses the keys nobody asked for.
class TableReader {
 public:
  TableReader(const toml::table& table, std::string path, const std::string& source)
      : table_(table), path_(std::move(path)), source_(source) {}

  std::string full(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  std::string at(const toml::node& node) const {
    const auto& b = node.source().begin;
    if (b.line == 0) return source_;
    return source_ + ":" + std::to_string(b.line) + ":" + std::to_string(b.column);
  }

  const toml::node* find(std::string_view key) {
    known_.insert(std::string(key));
    return table_.get(key);
  }
  const toml::node& require(std::string_view key, std::string_view what) {
    const toml::node* node = find(key);
    TESSEL_CHECK(node != nullptr, source_, ": missing key '", full(key), "' (", what, ")");
    return *node;
  }

  std::string string(std::string_view key, std::string_view what) {
    const toml::node& node = require(key, what);
    const auto* s = node.as_string();
    TESSEL_CHECK(s && !s->get().empty(), at(node), ": ", full(key),
                 ": expected a non-empty string (", what, "), got ", describe(node));
    return s->get();
  }
  // A finite number > 0 (integer or float): rates, sizes and latencies are never zero or negative.
  double positive(const toml::node& node, std::string_view key, std::string_view what) const {
    double v = std::numeric_limits<double>::quiet_NaN();
    if (const auto* i = node.as_integer()) v = double(i->get());
    if (const auto* f = node.as_floating_point()) v = f->get();
    TESSEL_CHECK(std::isfinite(v) && v > 0, at(node), ": ", full(key),
                 ": expected a positive number (", what, "), got ", describe(node));
    return v;
  }
  double positive(std::string_view key, std::string_view what) {
    return positive(require(key, what), key, what);
  }
  int64_t count(std::string_view key, std::string_view what) {
    const toml::node& node = require(key, what);
    const auto* i = node.as_integer();
    TESSEL_CHECK(i && i->get() >= 1, at(node), ": ", full(key), ": expected an integer >= 1 (",
                 what, "), got ", describe(node));
    return i->get();
  }
  // The sub-table at `key`, or nullptr when absent; a non-table value is refused.
  const toml::table* table(std::string_view key, std::string_view what) {
    const toml::node* node = find(key);
    if (!node) return nullptr;
    TESSEL_CHECK(node->is_table(), at(*node), ": ", full(key), " must be a table ([", full(key),
                 "]: ", what, "), got ", describe(*node));
    return node->as_table();
  }

  void finish() const {
    for (auto&& [k, node] : table_) {
      const std::string key(k.str());
      if (known_.count(key)) continue;
      std::string list;
      for (const std::string& name : known_) list += (list.empty() ? "" : ", ") + name;
      TESSEL_FAIL(at(node), ": unknown key '", full(key), "'",
                  path_.empty() ? std::string(" at the top level") : " in [" + path_ + "]",
                  " (known: ", list, ")");
    }
  }

 private:
  const toml::table& table_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> known_;
};

LinkSpec read_link(const toml::table& t, const std::string& path, const std::string& source) {
  TableReader r(t, path, source);
  LinkSpec link;
  link.bandwidth = r.positive("bandwidth", "bytes/s per device and per direction");
  link.latency = r.positive("latency", "seconds per message");
  if (const toml::node* node = r.find("efficiency")) {
    link.efficiency = r.positive(*node, "efficiency", "the bandwidth's share left to the payload");
    TESSEL_CHECK(link.efficiency <= 1, r.at(*node), ": ", path, ".efficiency: expected a ",
                 "fraction of the bandwidth in (0, 1], got ", link.efficiency);
  }
  if (const toml::node* node = r.find("torus")) {
    const toml::array* dims = node->as_array();
    TESSEL_CHECK(dims && !dims->empty(), source, ": ", path, ".torus must be an array of ",
                 "dimensions (e.g. [4, 4, 4])");
    for (const toml::node& d : *dims) {
      const auto* i = d.as_integer();
      TESSEL_CHECK(i && i->get() >= 1, source, ": ", path, ".torus: every dimension must be a ",
                   "positive integer");
      link.torus.push_back(int(i->get()));
    }
  }
  r.finish();
  return link;
}

// An array of tables ([[gemm]], [[collective]]); each element read by `read`.
template <typename Fn>
void for_each_entry(TableReader& top, std::string_view key, std::string_view what, const Fn& read) {
  const toml::node* node = top.find(key);
  if (!node) return;
  const auto* array = node->as_array();
  TESSEL_CHECK(array && array->is_array_of_tables(), top.at(*node), ": ", key,
               " must be an array of tables ([[", key, "]]: ", what, "), got ", describe(*node));
  for (size_t i = 0; i < array->size(); ++i)
    read(*array->get(i)->as_table(), std::string(key) + "[" + std::to_string(i) + "]");
}

}  // namespace

Cluster Cluster::parse(const std::string& toml_text, const std::string& source) {
  toml::table doc;
  try {
    doc = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    TESSEL_FAIL(source, ":", b.line, ":", b.column, ": TOML syntax error: ", e.description());
  }
  Cluster c;
  c.source = source;
  TableReader top(doc, "", source);
  c.name = top.string("name", "what this description is, e.g. \"a100-80gb\"");
  const int64_t per_node = top.count("devices_per_node", "devices in one node");
  const int64_t nodes = top.count("nodes", "number of nodes");
  constexpr int64_t kMaxDevices = int64_t(1) << 24;
  TESSEL_CHECK(per_node <= kMaxDevices && nodes <= kMaxDevices && per_node * nodes <= kMaxDevices,
               source, ": devices_per_node x nodes = ", per_node, " x ", nodes,
               " is more devices than the planner handles (2^24)");
  c.devices_per_node = int(per_node);
  c.nodes = int(nodes);

  const toml::table* dev = top.table("device", "the device kind");
  TESSEL_CHECK(dev, source, ": missing table [device] (kind, memory_bytes, memory_bandwidth, ",
               "[device.peak_flops])");
  TableReader d(*dev, "device", source);
  c.device.kind = d.string("kind", "device name, e.g. \"A100-SXM4-80GB\"");
  const double mem = d.positive("memory_bytes", "memory per device in bytes");
  TESSEL_CHECK(mem == std::trunc(mem) && mem < 0x1p62, d.at(d.require("memory_bytes", "")),
               ": device.memory_bytes: expected a whole number of bytes, got ", mem);
  c.device.memory_bytes = int64_t(mem);
  c.device.memory_bandwidth = d.positive("memory_bandwidth", "bytes/s");
  if (const toml::node* node = d.find("op_overhead"))
    c.device.op_overhead = d.positive(*node, "op_overhead", "seconds per op outside its kernel");
  if (const toml::node* node = d.find("op_overhead_per_byte"))
    c.device.op_overhead_per_byte = d.positive(*node, "op_overhead_per_byte",
                                               "seconds per byte an op writes, outside its kernel");
  if (const toml::node* node = d.find("cpu_share")) {
    c.device.cpu_share = d.positive(*node, "cpu_share", "share of the wall clock, at most 1");
    TESSEL_CHECK(c.device.cpu_share <= 1, d.at(*node), ": device.cpu_share: expected a number in ",
                 "(0, 1] (share of the wall clock), got ", c.device.cpu_share);
  }
  if (d.find("cache_bytes"))
    c.device.cache_bytes = d.count("cache_bytes", "bytes of the caches private to a rank's cores");
  const toml::table* peaks = d.table("peak_flops", "FLOP/s per dtype");
  TESSEL_CHECK(peaks, source, ": missing table [device.peak_flops] (dense FLOP/s per dtype: ",
               "f32 required; tf32, bf16, f16, int8 optional)");
  TableReader p(*peaks, "device.peak_flops", source);
  c.device.peak_flops.assign(std::size(kPeakDtypes), 0.0);
  for (size_t i = 0; i < std::size(kPeakDtypes); ++i) {
    const std::string_view dt = kPeakDtypes[i];
    if (dt == "f32") {
      c.device.peak_flops[i] = p.positive(dt, "dense FLOP/s");
    } else if (const toml::node* node = p.find(dt)) {
      c.device.peak_flops[i] = p.positive(*node, dt, "dense FLOP/s");
    }
  }
  p.finish();
  d.finish();

  const toml::table* links = top.table("links", "the interconnect by level");
  if (links) {
    TableReader l(*links, "links", source);
    if (const toml::table* t = l.table("intra_node", "the link between devices of one node"))
      c.intra_node = read_link(*t, "links.intra_node", source);
    if (const toml::table* t = l.table("inter_node", "the link between nodes"))
      c.inter_node = read_link(*t, "links.inter_node", source);
    l.finish();
  }
  if (c.intra_node && !c.intra_node->torus.empty()) {
    int64_t product = 1;
    for (int d : c.intra_node->torus) product *= d;
    TESSEL_CHECK(product == c.devices_per_node, source, ": links.intra_node.torus has ", product,
                 " devices, devices_per_node = ", c.devices_per_node);
  }
  TESSEL_CHECK(c.inter_node == std::nullopt || c.inter_node->torus.empty(), source,
               ": links.inter_node.torus: only the devices of a node form a torus here");
  TESSEL_CHECK(c.devices_per_node == 1 || c.intra_node, source, ": missing table ",
               "[links.intra_node] (bandwidth, latency): devices_per_node = ", c.devices_per_node);
  TESSEL_CHECK(c.nodes == 1 || c.inter_node, source, ": missing table [links.inter_node] ",
               "(bandwidth, latency): nodes = ", c.nodes);
  if (const toml::table* t = top.table("storage", "the disk memory offload swaps to")) {
    TableReader st(*t, "storage", source);
    c.storage = StorageSpec{st.positive("read_bandwidth", "bytes/s read from the disk"),
                            st.positive("write_bandwidth", "bytes/s written to the disk")};
    st.finish();
  }

  for_each_entry(
      top, "gemm", "measured GEMM rates", [&](const toml::table& t, const std::string& path) {
        TableReader g(t, path, source);
        GemmPoint pt;
        pt.dtype = g.string("dtype", "f32, tf32, bf16, f16 or int8");
        const std::string_view dt = pt.dtype;
        TESSEL_CHECK(
            std::find(std::begin(kPeakDtypes), std::end(kPeakDtypes), dt) != std::end(kPeakDtypes),
            g.at(g.require("dtype", "")), ": ", path, ".dtype: expected f32, tf32, bf16, ",
            "f16 or int8, got \"", pt.dtype, "\"");
        pt.m = g.count("m", "rows of the product");
        pt.n = g.count("n", "columns of the product");
        pt.k = g.count("k", "inner dimension");
        pt.flops = g.positive("flops", "FLOP/s measured");
        if (const toml::node* node = g.find("warm_flops"))
          pt.warm_flops = g.positive(*node, "warm_flops", "FLOP/s measured with operands in cache");
        if (g.find("layout")) {
          pt.layout = g.string("layout", "nn, nt, tn or tt");
          TESSEL_CHECK(std::find(std::begin(kGemmLayouts), std::end(kGemmLayouts),
                                 std::string_view(pt.layout)) != std::end(kGemmLayouts),
                       g.at(g.require("layout", "")), ": ", path,
                       ".layout: expected nn, nt, tn or tt, got \"", pt.layout, "\"");
        }
        g.finish();
        c.gemm.push_back(pt);
      });
  for_each_entry(
      top, "kernel", "measured kernel calls", [&](const toml::table& t, const std::string& path) {
        TableReader r(t, path, source);
        KernelPoint pt;
        pt.kernel = r.string("name", "the kernel as the trace names it, e.g. \"layer_norm\"");
        pt.bytes = r.positive("bytes", "bytes read and written by the call");
        const toml::node& f = r.require("flops", "FLOPs of the call, 0 for a copy");
        pt.flops = f.value_or(-1.0);
        if (const auto* i = f.as_integer()) pt.flops = double(i->get());
        TESSEL_CHECK(std::isfinite(pt.flops) && pt.flops >= 0, r.at(f), ": ", path,
                     ".flops: expected a number >= 0 (FLOPs of the call), got ", describe(f));
        pt.seconds = r.positive("seconds", "seconds per call measured");
        if (const toml::node* node = r.find("warm_seconds"))
          pt.warm_seconds =
              r.positive(*node, "warm_seconds", "seconds per call with operands in cache");
        if (r.find("dtype")) {
          pt.dtype = r.string("dtype", "f32, bf16 or f16: the call's first input");
          TESSEL_CHECK(pt.dtype == "f32" || pt.dtype == "bf16" || pt.dtype == "f16",
                       r.at(r.require("dtype", "")), ": ", path,
                       ".dtype: expected f32, bf16 or f16, got \"", pt.dtype, "\"");
        }
        r.finish();
        c.kernels.push_back(pt);
      });
  for_each_entry(top, "collective", "measured collective fits",
                 [&](const toml::table& t, const std::string& path) {
                   TableReader f(t, path, source);
                   CollectiveFit fit;
                   fit.op = f.string("op", "all_reduce or send_recv");
                   TESSEL_CHECK(fit.op == "all_reduce" || fit.op == "send_recv",
                                f.at(f.require("op", "")), ": ", path,
                                ".op: expected \"all_reduce\" or \"send_recv\", got \"", fit.op,
                                "\"");
                   fit.ranks = int(f.count("ranks", "ranks in the measured group"));
                   fit.alpha = f.positive("alpha", "seconds per call");
                   fit.beta = f.positive("beta", "seconds per byte");
                   f.finish();
                   c.collectives.push_back(fit);
                 });
  top.finish();
  return c;
}

Cluster Cluster::load(const std::string& path) {
  std::ifstream in(path);
  TESSEL_CHECK(in.good(), "cluster description ", path, ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

}  // namespace tessel::plan
