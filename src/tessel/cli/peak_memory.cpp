// SPDX-License-Identifier: Apache-2.0
// The process's peak memory for the inference commands (peak_memory.h).
#include "tessel/cli/peak_memory.h"

#include <cstdio>

#include "tessel/core/process_memory.h"

namespace tessel::cli {

namespace {

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", double(bytes) / double(1 << 20));
  return text;
}

}  // namespace

std::string peak_memory_line(int rank) {
  const ProcessMemory pm = process_memory();
  return (rank >= 0 ? "rank " + std::to_string(rank) + " " : std::string()) + "peak RSS " +
         mib(pm.peak_rss_bytes) + " (VmHWM), peak address space " + mib(pm.peak_vm_bytes) +
         " (VmPeak)";
}

void add_peak_memory(nlohmann::json& out) {
  const ProcessMemory pm = process_memory();
  out["peak_rss_bytes"] = pm.peak_rss_bytes;
  out["peak_vm_bytes"] = pm.peak_vm_bytes;
}

}  // namespace tessel::cli
