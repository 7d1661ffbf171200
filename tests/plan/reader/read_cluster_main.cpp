// SPDX-License-Identifier: Apache-2.0
// Reads a cluster description with the planner's reader and prints what it holds as one JSON
// object, so a test script can check a file that `tessel plan calibrate` wrote. Exit 1 with the
// reader's message when the file is refused.
#include <algorithm>
#include <exception>
#include <iostream>
#include <set>
#include <string>

#include "tessel/plan/cluster.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " CLUSTER.toml\n";
    return 2;
  }
  try {
    const tessel::plan::Cluster c = tessel::plan::Cluster::load(argv[1]);
    std::cout << "{\"name\": \"" << c.name << "\", \"devices_per_node\": " << c.devices_per_node
              << ", \"nodes\": " << c.nodes << ", \"memory_bytes\": " << c.device.memory_bytes
              << ", \"memory_bandwidth\": " << c.device.memory_bandwidth
              << ", \"peak_f32\": " << c.peak_flops("f32")
              << ", \"peak_bf16\": " << c.device.peak_flops[tessel::plan::peak_dtype_index("bf16")]
              << ", \"gemm\": " << c.gemm.size() << ", \"gemm_bf16\": "
              << std::count_if(c.gemm.begin(), c.gemm.end(),
                               [](const auto& g) { return g.dtype == "bf16"; });
    std::cout << ", \"op_overhead\": " << c.device.op_overhead
              << ", \"op_overhead_per_byte\": " << c.device.op_overhead_per_byte
              << ", \"gemm_layouts\": [";
    std::set<std::string> layouts, kernels;
    for (const auto& g : c.gemm) layouts.insert(g.layout);
    for (const auto& k : c.kernels) kernels.insert(k.kernel);
    for (auto it = layouts.begin(); it != layouts.end(); ++it)
      std::cout << (it == layouts.begin() ? "" : ", ") << "\"" << *it << "\"";
    std::cout << "], \"kernel_points\": " << c.kernels.size() << ", \"kernels\": [";
    for (auto it = kernels.begin(); it != kernels.end(); ++it)
      std::cout << (it == kernels.begin() ? "" : ", ") << "\"" << *it << "\"";
    std::cout << "], \"kernel_dtypes\": [";
    std::set<std::string> dtypes;
    for (const auto& k : c.kernels) dtypes.insert(k.dtype);
    for (auto it = dtypes.begin(); it != dtypes.end(); ++it)
      std::cout << (it == dtypes.begin() ? "" : ", ") << "\"" << *it << "\"";
    std::cout << "], \"kernel_points_warm\": "
              << std::count_if(c.kernels.begin(), c.kernels.end(),
                               [](const auto& k) { return k.warm_seconds > 0; })
              << ", \"gemm_warm\": "
              << std::count_if(c.gemm.begin(), c.gemm.end(),
                               [](const auto& g) { return g.warm_flops > 0; })
              << ", \"cache_bytes\": " << c.device.cache_bytes;
    if (c.intra_node)
      std::cout << ", \"intra_bandwidth\": " << c.intra_node->bandwidth
                << ", \"intra_latency\": " << c.intra_node->latency;
    if (c.storage)
      std::cout << ", \"storage_read\": " << c.storage->read_bandwidth
                << ", \"storage_write\": " << c.storage->write_bandwidth;
    std::cout << ", \"collectives\": [";
    for (size_t i = 0; i < c.collectives.size(); ++i)
      std::cout << (i ? ", " : "") << "{\"op\": \"" << c.collectives[i].op
                << "\", \"ranks\": " << c.collectives[i].ranks
                << ", \"alpha\": " << c.collectives[i].alpha
                << ", \"beta\": " << c.collectives[i].beta << "}";
    std::cout << "]}" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
