// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/process_memory.h"

#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace tessel {

ProcessMemory process_memory() {
  ProcessMemory m;
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long kb = 0;
    if (std::strncmp(line, "VmRSS:", 6) == 0 && std::sscanf(line + 6, "%lld", &kb) == 1)
      m.rss_bytes = int64_t(kb) * 1024;
    else if (std::strncmp(line, "VmHWM:", 6) == 0 && std::sscanf(line + 6, "%lld", &kb) == 1)
      m.peak_rss_bytes = int64_t(kb) * 1024;
    else if (std::strncmp(line, "VmPeak:", 7) == 0 && std::sscanf(line + 7, "%lld", &kb) == 1)
      m.peak_vm_bytes = int64_t(kb) * 1024;
  }
  std::fclose(f);
  return m;
}

ResidentPeakSampler::ResidentPeakSampler(int interval_ms) {
  peak_ = process_memory().rss_bytes;
  thread_ = std::thread([this, interval_ms] {
    while (!stop_.load()) {
      const int64_t now = process_memory().rss_bytes;
      if (now > peak_.load()) peak_ = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    }
  });
}

ResidentPeakSampler::~ResidentPeakSampler() {
  stop();
}

int64_t ResidentPeakSampler::stop() {
  if (thread_.joinable()) {
    stop_ = true;
    thread_.join();
    const int64_t now = process_memory().rss_bytes;
    if (now > peak_.load()) peak_ = now;
  }
  return peak_.load();
}

void release_free_heap() {
  malloc_trim(0);
}

}  // namespace tessel
