// SPDX-License-Identifier: Apache-2.0
// Cluster descriptions: the reader accepts the documented schema (and what to_toml writes), and
// every malformed, missing, mistyped or unknown key is one Error naming the key and the file.
#include "tessel/plan/cluster.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>

#include "tessel/core/error.h"

namespace tessel::plan {
namespace {

namespace fs = std::filesystem;

const std::string kNode = R"(name = "test-node"
devices_per_node = 4
nodes = 3

[device]
kind = "X1"
memory_bytes = 42949672960
memory_bandwidth = 1.5e12

[device.peak_flops]
f32 = 19.5e12
bf16 = 312e12

[links.intra_node]
bandwidth = 300e9
latency = 0.6e-6

[links.inter_node]
bandwidth = 25e9
latency = 2.7e-6

[[gemm]]
dtype = "f32"
m = 1024
n = 1024
k = 1024
flops = 9.75e12

[[gemm]]
dtype = "f32"
m = 16
n = 1024
k = 1024
flops = 1.95e12

[[collective]]
op = "all_reduce"
ranks = 2
alpha = 3e-6
beta = 1e-10
)";

// The message of the Error that parsing `text` throws ("" when it parses).
std::string error_of(const std::string& text) {
  try {
    Cluster::parse(text, "node.toml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(Cluster, ReadsEveryKeyOfTheSchema) {
  const Cluster c = Cluster::parse(kNode, "node.toml");
  EXPECT_EQ(c.name, "test-node");
  EXPECT_EQ(c.devices_per_node, 4);
  EXPECT_EQ(c.nodes, 3);
  EXPECT_EQ(c.num_devices(), 12);
  EXPECT_EQ(c.device.kind, "X1");
  EXPECT_EQ(c.device.memory_bytes, int64_t(40) << 30);
  EXPECT_DOUBLE_EQ(c.device.memory_bandwidth, 1.5e12);
  EXPECT_DOUBLE_EQ(c.peak_flops("f32"), 19.5e12);
  EXPECT_DOUBLE_EQ(c.peak_flops("bf16"), 312e12);
  ASSERT_TRUE(c.intra_node && c.inter_node);
  EXPECT_DOUBLE_EQ(c.link(false).bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(c.link(true).latency, 2.7e-6);
  ASSERT_EQ(c.gemm.size(), 2u);
  EXPECT_EQ(c.gemm[1].m, 16);
  ASSERT_EQ(c.collectives.size(), 1u);
  EXPECT_EQ(c.collectives[0].op, "all_reduce");
  EXPECT_EQ(c.node_of(0), 0);
  EXPECT_EQ(c.node_of(3), 0);
  EXPECT_EQ(c.node_of(4), 1);
  EXPECT_EQ(c.node_of(11), 2);
  EXPECT_THROW(c.node_of(12), Error);
}

TEST(Cluster, WritesTomlThatReadsBackEqual) {
  const Cluster a = Cluster::parse(kNode, "node.toml");
  const Cluster b = Cluster::parse(a.to_toml(), "written.toml");
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.devices_per_node, a.devices_per_node);
  EXPECT_EQ(b.nodes, a.nodes);
  EXPECT_EQ(b.device.kind, a.device.kind);
  EXPECT_EQ(b.device.memory_bytes, a.device.memory_bytes);
  EXPECT_EQ(b.device.memory_bandwidth, a.device.memory_bandwidth);
  EXPECT_EQ(b.device.peak_flops, a.device.peak_flops);
  EXPECT_EQ(b.intra_node->bandwidth, a.intra_node->bandwidth);
  EXPECT_EQ(b.intra_node->latency, a.intra_node->latency);
  EXPECT_EQ(b.inter_node->latency, a.inter_node->latency);
  ASSERT_EQ(b.gemm.size(), a.gemm.size());
  EXPECT_EQ(b.gemm[1].flops, a.gemm[1].flops);
  ASSERT_EQ(b.collectives.size(), 1u);
  EXPECT_EQ(b.collectives[0].beta, a.collectives[0].beta);
}

TEST(Cluster, WritesNamesWithQuotesAndControlCharacters) {
  Cluster a = Cluster::parse(kNode, "node.toml");
  a.name = "node \"a\"\\b\tc\nd";
  a.device.kind = "k\x01";
  const Cluster b = Cluster::parse(a.to_toml(), "written.toml");
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.device.kind, a.device.kind);
}

// The calibration keys (op_overhead, a GEMM's layout, [[kernel]] points) are optional: kNode has
// none and reads as before (layout "nn", no kernels, no overhead); with them they read, write
// back equal, and a wrong value is refused naming the key.
TEST(Cluster, CalibrationKeysAreOptionalAndChecked) {
  const Cluster old = Cluster::parse(kNode, "node.toml");
  EXPECT_EQ(old.device.op_overhead, 0);
  EXPECT_EQ(old.gemm[0].layout, "nn");
  EXPECT_TRUE(old.kernels.empty());
  const std::string calibrated =
      replaced(replaced(kNode, "memory_bandwidth = 1.5e12\n",
                        "memory_bandwidth = 1.5e12\nop_overhead = 2.5e-6\ncpu_share = 0.5\n"),
               "flops = 1.95e12\n", "flops = 1.95e12\nlayout = \"tn\"\n") +
      "\n[[kernel]]\nname = \"layer_norm\"\nbytes = 4096\nflops = 0\nseconds = 3.5e-6\n";
  const Cluster a = Cluster::parse(calibrated, "node.toml");
  EXPECT_EQ(a.device.op_overhead, 2.5e-6);
  EXPECT_EQ(a.device.cpu_share, 0.5);
  EXPECT_EQ(old.device.cpu_share, 1);
  EXPECT_EQ(a.gemm[0].layout, "nn");
  EXPECT_EQ(a.gemm[1].layout, "tn");
  ASSERT_EQ(a.kernels.size(), 1u);
  EXPECT_EQ(a.kernels[0].kernel, "layer_norm");
  EXPECT_EQ(a.kernels[0].bytes, 4096);
  EXPECT_EQ(a.kernels[0].flops, 0);
  EXPECT_EQ(a.kernels[0].seconds, 3.5e-6);
  const Cluster b = Cluster::parse(a.to_toml(), "written.toml");
  EXPECT_EQ(b.device.op_overhead, a.device.op_overhead);
  EXPECT_EQ(b.device.cpu_share, 0.5);
  EXPECT_EQ(b.gemm[1].layout, "tn");
  ASSERT_EQ(b.kernels.size(), 1u);
  EXPECT_EQ(b.kernels[0].seconds, a.kernels[0].seconds);
  EXPECT_EQ(b.kernel_points("layer_norm").size(), 1u);
  EXPECT_TRUE(b.kernel_points("softmax").empty());
  ASSERT_NE(b.measured_collective("all_reduce", 2), nullptr);
  EXPECT_EQ(b.measured_collective("all_reduce", 4), nullptr);

  std::string e = error_of(replaced(calibrated, "layout = \"tn\"", "layout = \"nx\""));
  EXPECT_NE(e.find("gemm[1].layout: expected nn, nt, tn or tt, got \"nx\""), std::string::npos)
      << e;
  e = error_of(replaced(calibrated, "op_overhead = 2.5e-6", "op_overhead = -1"));
  EXPECT_NE(e.find("device.op_overhead: expected a positive number"), std::string::npos) << e;
  e = error_of(replaced(calibrated, "cpu_share = 0.5", "cpu_share = 1.5"));
  EXPECT_NE(e.find("device.cpu_share: expected a number in (0, 1]"), std::string::npos) << e;
  e = error_of(replaced(calibrated, "flops = 0\n", "flops = -3\n"));
  EXPECT_NE(e.find("kernel[0].flops: expected a number >= 0"), std::string::npos) << e;
  e = error_of(replaced(calibrated, "seconds = 3.5e-6", "seconds = \"slow\""));
  EXPECT_NE(e.find("kernel[0].seconds: expected a positive number"), std::string::npos) << e;
  e = error_of(replaced(calibrated, "bytes = 4096\n", ""));
  EXPECT_NE(e.find("missing key 'kernel[0].bytes'"), std::string::npos) << e;
  // The in-cache figures and the cache size: optional, read, written back, checked.
  const std::string warm = replaced(
      replaced(replaced(calibrated, "seconds = 3.5e-6", "seconds = 3.5e-6\nwarm_seconds = 2e-6"),
               "layout = \"tn\"\n", "layout = \"tn\"\nwarm_flops = 2.5e12\n"),
      "cpu_share = 0.5\n", "cpu_share = 0.5\ncache_bytes = 2097152\n");
  const Cluster w = Cluster::parse(Cluster::parse(warm, "node.toml").to_toml(), "written.toml");
  EXPECT_EQ(w.device.cache_bytes, 2097152);
  EXPECT_EQ(w.gemm[1].warm_flops, 2.5e12);
  EXPECT_EQ(w.gemm[0].warm_flops, 0);
  EXPECT_EQ(w.kernels[0].warm_seconds, 2e-6);
  EXPECT_EQ(a.kernels[0].warm_seconds, 0);
  EXPECT_EQ(a.device.cache_bytes, 0);
  e = error_of(replaced(warm, "warm_seconds = 2e-6", "warm_seconds = 0"));
  EXPECT_NE(e.find("kernel[0].warm_seconds: expected a positive number"), std::string::npos) << e;
  e = error_of(replaced(warm, "warm_flops = 2.5e12", "warm_flops = -1"));
  EXPECT_NE(e.find("gemm[1].warm_flops: expected a positive number"), std::string::npos) << e;
  e = error_of(replaced(warm, "warm_seconds = 2e-6", "warm_seconds = 2e-6\ndtype = \"f64\""));
  EXPECT_NE(e.find("kernel[0].dtype: expected f32, bf16 or f16, got \"f64\""), std::string::npos)
      << e;
  e = error_of(replaced(warm, "cache_bytes = 2097152", "cache_bytes = 0.5"));
  EXPECT_NE(e.find("device.cache_bytes: expected an integer >= 1"), std::string::npos) << e;
  e = error_of(replaced(calibrated, "seconds = 3.5e-6", "seconds = 3.5e-6\nbeta = 1"));
  EXPECT_NE(e.find("unknown key 'kernel[0].beta'"), std::string::npos) << e;
}

TEST(Cluster, MissingKeysAreNamed) {
  std::string e = error_of(replaced(kNode, "memory_bytes = 42949672960\n", ""));
  EXPECT_NE(e.find("node.toml: missing key 'device.memory_bytes'"), std::string::npos) << e;
  e = error_of(replaced(kNode, "f32 = 19.5e12\n", ""));
  EXPECT_NE(e.find("missing key 'device.peak_flops.f32'"), std::string::npos) << e;
  e = error_of(replaced(kNode, "name = \"test-node\"\n", ""));
  EXPECT_NE(e.find("missing key 'name'"), std::string::npos) << e;
  e = error_of(replaced(kNode, "latency = 2.7e-6\n", ""));
  EXPECT_NE(e.find("missing key 'links.inter_node.latency'"), std::string::npos) << e;
  // Links are required by the levels the description has.
  e = error_of(replaced(kNode, "[links.inter_node]\nbandwidth = 25e9\nlatency = 2.7e-6\n", ""));
  EXPECT_NE(e.find("missing table [links.inter_node]"), std::string::npos) << e;
  EXPECT_NE(e.find("nodes = 3"), std::string::npos) << e;
  e = error_of(replaced(kNode, "[links.intra_node]\nbandwidth = 300e9\nlatency = 0.6e-6\n", ""));
  EXPECT_NE(e.find("missing table [links.intra_node]"), std::string::npos) << e;
}

TEST(Cluster, WrongTypesAndRangesNameTheKeyAndItsLine) {
  std::string e = error_of(replaced(kNode, "latency = 0.6e-6", "latency = \"fast\""));
  EXPECT_NE(e.find("node.toml:16:11: links.intra_node.latency: expected a positive number"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("got string \"fast\""), std::string::npos) << e;
  e = error_of(replaced(kNode, "bandwidth = 25e9", "bandwidth = -25e9"));
  EXPECT_NE(e.find("links.inter_node.bandwidth: expected a positive number"), std::string::npos)
      << e;
  e = error_of(replaced(kNode, "nodes = 3", "nodes = 2.5"));
  EXPECT_NE(e.find("nodes: expected an integer >= 1"), std::string::npos) << e;
  e = error_of(replaced(kNode, "nodes = 3", "nodes = 1099511627776"));
  EXPECT_NE(e.find("devices_per_node x nodes = 4 x 1099511627776 is more devices"),
            std::string::npos)
      << e;
  e = error_of(replaced(kNode, "devices_per_node = 4", "devices_per_node = 0"));
  EXPECT_NE(e.find("devices_per_node: expected an integer >= 1"), std::string::npos) << e;
  e = error_of(replaced(kNode, "memory_bytes = 42949672960", "memory_bytes = 1.5"));
  EXPECT_NE(e.find("device.memory_bytes: expected a whole number of bytes"), std::string::npos)
      << e;
  e = error_of(replaced(kNode, "dtype = \"f32\"\nm = 16", "dtype = \"fp32\"\nm = 16"));
  EXPECT_NE(e.find("gemm[1].dtype: expected f32, tf32, bf16, f16 or int8, got \"fp32\""),
            std::string::npos)
      << e;
  e = error_of(replaced(kNode, "op = \"all_reduce\"", "op = \"allreduce\""));
  EXPECT_NE(e.find("collective[0].op"), std::string::npos) << e;
  e = error_of(replaced(kNode, "[device]\n", "device = 3\n[devices]\n"));
  EXPECT_FALSE(e.empty());
  e = error_of("gemm = 7\n" + kNode.substr(0, kNode.find("[[gemm]]")));
  EXPECT_NE(e.find("gemm must be an array of tables"), std::string::npos) << e;
}

TEST(Cluster, ATorusOfTheNodesDevicesIsReadWrittenAndChecked) {
  // kNode has 4 devices a node: a 2 x 2 torus of them.
  const std::string torus = replaced(kNode, "latency = 0.6e-6", "latency = 0.6e-6\ntorus = [2, 2]");
  const Cluster c = Cluster::parse(torus, "node.toml");
  ASSERT_TRUE(c.intra_node);
  EXPECT_EQ(c.intra_node->torus, (std::vector<int>{2, 2}));
  EXPECT_EQ(Cluster::parse(c.to_toml(), "again.toml").intra_node->torus, c.intra_node->torus);
  std::string e = error_of(replaced(kNode, "latency = 0.6e-6", "latency = 0.6e-6\ntorus = [4, 4]"));
  EXPECT_NE(e.find("links.intra_node.torus has 16 devices, devices_per_node = 4"),
            std::string::npos)
      << e;
  e = error_of(replaced(kNode, "latency = 0.6e-6", "latency = 0.6e-6\ntorus = [2, \"2\"]"));
  EXPECT_NE(e.find("links.intra_node.torus: every dimension must be a positive integer"),
            std::string::npos)
      << e;
  e = error_of(replaced(kNode, "latency = 2.7e-6", "latency = 2.7e-6\ntorus = [3]"));
  EXPECT_NE(e.find("links.inter_node.torus: only the devices of a node form a torus"),
            std::string::npos)
      << e;
}

// A link's efficiency (the share of its bandwidth the payload gets after the transport's
// protocol) is optional, 1 by default, read and written back, and refused outside (0, 1].
TEST(Cluster, ALinksEfficiencyIsReadWrittenAndChecked) {
  EXPECT_EQ(Cluster::parse(kNode, "node.toml").intra_node->efficiency, 1.0);
  const std::string with =
      replaced(kNode, "latency = 0.6e-6", "latency = 0.6e-6\nefficiency = 0.8");
  const Cluster c = Cluster::parse(with, "node.toml");
  EXPECT_DOUBLE_EQ(c.intra_node->efficiency, 0.8);
  EXPECT_DOUBLE_EQ(c.intra_node->rate(), 0.8 * c.intra_node->bandwidth);
  EXPECT_EQ(c.inter_node->efficiency, 1.0);
  EXPECT_DOUBLE_EQ(Cluster::parse(c.to_toml(), "again.toml").intra_node->efficiency, 0.8);
  std::string e =
      error_of(replaced(kNode, "latency = 0.6e-6", "latency = 0.6e-6\nefficiency = 1.25"));
  EXPECT_NE(e.find("links.intra_node.efficiency: expected a fraction of the bandwidth in (0, 1], "
                   "got 1.25"),
            std::string::npos)
      << e;
  e = error_of(replaced(kNode, "latency = 2.7e-6", "latency = 2.7e-6\nefficiency = 0"));
  EXPECT_NE(e.find("links.inter_node.efficiency: expected a positive number"), std::string::npos)
      << e;
}

// [storage] (the disk memory offload swaps to) is optional: kNode has none; with it, it reads,
// writes back equal, and a missing, non-positive or unknown key is refused by name.
TEST(Cluster, StorageIsOptionalReadWrittenAndChecked) {
  EXPECT_FALSE(Cluster::parse(kNode, "node.toml").storage);
  const std::string disk =
      kNode + "\n[storage]\nread_bandwidth = 1.07e9\nwrite_bandwidth = 1.68e9\n";
  const Cluster c = Cluster::parse(disk, "node.toml");
  ASSERT_TRUE(c.storage);
  EXPECT_DOUBLE_EQ(c.storage->read_bandwidth, 1.07e9);
  EXPECT_DOUBLE_EQ(c.storage->write_bandwidth, 1.68e9);
  const Cluster again = Cluster::parse(c.to_toml(), "again.toml");
  ASSERT_TRUE(again.storage);
  EXPECT_EQ(again.storage->read_bandwidth, c.storage->read_bandwidth);
  EXPECT_EQ(again.storage->write_bandwidth, c.storage->write_bandwidth);
  std::string e = error_of(kNode + "\n[storage]\nread_bandwidth = 1e9\n");
  EXPECT_NE(e.find("storage.write_bandwidth"), std::string::npos) << e;
  e = error_of(kNode + "\n[storage]\nread_bandwidth = 0\nwrite_bandwidth = 1e9\n");
  EXPECT_NE(e.find("storage.read_bandwidth"), std::string::npos) << e;
  e = error_of(kNode + "\n[storage]\nread_bandwidth = 1e9\nwrite_bandwidth = 1e9\niops = 3\n");
  EXPECT_NE(e.find("iops"), std::string::npos) << e;
}

TEST(Cluster, UnknownKeysAreRefusedByName) {
  std::string e = error_of(replaced(kNode, "bf16 = 312e12", "bf16 = 312e12\nfp8 = 624e12"));
  EXPECT_NE(e.find("unknown key 'device.peak_flops.fp8' in [device.peak_flops]"), std::string::npos)
      << e;
  EXPECT_NE(e.find("known: bf16, f16, f32, int8, tf32"), std::string::npos) << e;
  e = error_of(replaced(kNode, "kind = \"X1\"", "kind = \"X1\"\nmemory = 3"));
  EXPECT_NE(e.find("node.toml:7:10: unknown key 'device.memory' in [device]"), std::string::npos)
      << e;
  e = error_of(kNode + "\n[links.pcie]\nbandwidth = 1\nlatency = 1\n");
  EXPECT_NE(e.find("unknown key 'links.pcie'"), std::string::npos) << e;
  e = error_of("nodez = 2\n" + kNode);
  EXPECT_NE(e.find("unknown key 'nodez' at the top level"), std::string::npos) << e;
  e = error_of(replaced(kNode, "flops = 1.95e12", "flops = 1.95e12\nthreads = 2"));
  EXPECT_NE(e.find("unknown key 'gemm[1].threads'"), std::string::npos) << e;
}

TEST(Cluster, SyntaxErrorsAndMissingFilesNameTheFile) {
  std::string e = error_of(replaced(kNode, "nodes = 3", "nodes = = 3"));
  EXPECT_NE(e.find("node.toml:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("TOML syntax error"), std::string::npos) << e;
  try {
    Cluster::load("/nonexistent/cluster.toml");
    FAIL() << "loaded a missing file";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("/nonexistent/cluster.toml: cannot open"),
              std::string::npos)
        << err.what();
  }
}

TEST(Cluster, QueriesNameWhatIsMissing) {
  const Cluster c = Cluster::parse(kNode, "node.toml");
  try {
    c.peak_flops("int8");
    FAIL() << "int8 has no peak in the description";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node.toml: device.peak_flops.int8 is not given"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(c.peak_flops("fp8"), Error);
  // The two f32 points (m = 16 and m = 1024 at n = k = 1024) are a grid along m: the rate is
  // interpolated in log m (n and k clamped to their one value), measured points exactly.
  auto along_m = [](double m) {
    const double w = std::log2(m / 16) / 6;
    return std::exp((1 - w) * std::log(1.95e12) + w * std::log(9.75e12)) / 19.5e12;
  };
  EXPECT_NEAR(c.gemm_efficiency("f32", 33, 1000, 1100), along_m(33), 1e-12);
  EXPECT_NEAR(c.gemm_efficiency("f32", 777, 1024, 1024), along_m(777), 1e-12);
  EXPECT_DOUBLE_EQ(c.gemm_efficiency("f32", 16, 1024, 1024), 1.95e12 / 19.5e12);
  EXPECT_DOUBLE_EQ(c.gemm_efficiency("f32", 4096, 1024, 1024), 9.75e12 / 19.5e12);
  // Not a grid (a third point off both lines): the nearest measured shape in log space.
  Cluster d = c;
  d.gemm.push_back({"f32", 64, 64, 64, 3.9e12});
  EXPECT_DOUBLE_EQ(d.gemm_efficiency("f32", 33, 1000, 1100), 1.95e12 / 19.5e12);
  EXPECT_DOUBLE_EQ(d.gemm_efficiency("f32", 777, 1024, 1024), 9.75e12 / 19.5e12);
  EXPECT_DOUBLE_EQ(d.gemm_efficiency("f32", 50, 70, 60), 3.9e12 / 19.5e12);
  EXPECT_DOUBLE_EQ(c.gemm_efficiency("bf16", 7, 7, 7), 1.0);  // no bf16 points
}

TEST(Cluster, WithDevicesScalesNodes) {
  const Cluster c = Cluster::parse(kNode, "node.toml");
  EXPECT_EQ(c.with_devices(3).num_devices(), 3);
  EXPECT_EQ(c.with_devices(3).nodes, 1);
  const Cluster big = c.with_devices(1024);
  EXPECT_EQ(big.nodes, 256);
  EXPECT_EQ(big.devices_per_node, 4);
  EXPECT_THROW(c.with_devices(6), Error);  // not a whole number of nodes
  Cluster one = c;
  one.inter_node.reset();
  EXPECT_THROW(one.with_devices(8), Error);
}

// The shipped node descriptions stay valid and complete: 8 devices per node, both link levels,
// every dense peak the data sheets give.
TEST(Cluster, ShippedDescriptionsParse) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(TESSEL_SOURCE_DIR "/configs/clusters")) {
    if (entry.path().extension() != ".toml") continue;
    const Cluster c = Cluster::load(entry.path().string());
    names.insert(entry.path().stem().string());
    EXPECT_EQ(c.name, entry.path().stem().string());
    EXPECT_EQ(c.devices_per_node, 8) << c.source;
    ASSERT_TRUE(c.intra_node && c.inter_node) << c.source;
    EXPECT_GT(c.intra_node->bandwidth, c.inter_node->bandwidth) << c.source;
    for (std::string_view dt : kPeakDtypes) EXPECT_GT(c.peak_flops(dt), 0) << c.source << dt;
    EXPECT_GT(c.peak_flops("bf16"), c.peak_flops("tf32")) << c.source;
    EXPECT_GT(c.peak_flops("tf32"), c.peak_flops("f32")) << c.source;
    // The published achieved rates: the largest products' (80-87% of peak) and NCCL's share of
    // NVLink; the network stays at its line rate.
    for (std::string_view dt : {"bf16", "f16"}) {
      const double e = c.gemm_efficiency(dt, 4096, 4096, 4096);
      EXPECT_GT(e, 0.80) << c.source << dt;
      EXPECT_LT(e, 0.87) << c.source << dt;
    }
    EXPECT_EQ(c.gemm_efficiency("tf32", 4096, 4096, 4096), 1.0) << c.source;
    EXPECT_DOUBLE_EQ(c.intra_node->efficiency, 0.8) << c.source;
    EXPECT_EQ(c.inter_node->efficiency, 1.0) << c.source;
  }
  EXPECT_EQ(names, (std::set<std::string>{"a100-40gb", "a100-80gb", "h100-sxm", "h200"}));
}

}  // namespace
}  // namespace tessel::plan
