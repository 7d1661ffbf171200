// SPDX-License-Identifier: Apache-2.0
// A small profiler: named scoped timers aggregated per name (calls, seconds, the calling
// thread's CPU seconds, and the FLOPs the caller says the work did). The CPU time is what to read
// on a loaded machine, where wall time includes waiting for a core; it covers only the thread that
// opened the scope (run with one thread for a whole-kernel figure). Off by default; while off a
// Scope costs one relaxed atomic load and a branch, so kernels can carry scopes permanently. Meant
// for the thread that issues the kernels (the kernels themselves parallelise inside the scope);
// totals are guarded by a mutex, so scopes on other threads are safe too, only slower.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::profile {

namespace detail {
extern std::atomic<bool> g_enabled;
}

inline bool enabled() {
  return detail::g_enabled.load(std::memory_order_relaxed);
}
void set_enabled(bool on);

struct Entry {
  std::string name;
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;        // 0 when the name's work is not counted in FLOPs
  double cpu_seconds = 0;  // the opening thread's CPU time (user + system)
};

// Adds one call of `seconds` (and `flops`, `cpu_seconds`) to `name`'s totals.
void add(std::string_view name, double seconds, double flops = 0, double cpu_seconds = 0);

// The calling thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID).
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
// All totals since the last reset, largest time first.
std::vector<Entry> snapshot();
void reset();

// Times its own lifetime under `name` when profiling is on at construction. `name` must outlive
// the scope (a literal, or a string the caller keeps).
class Scope {
 public:
  explicit Scope(std::string_view name, double flops = 0) {
    if (enabled()) {
      name_ = name;
      flops_ = flops;
      start_ = std::chrono::steady_clock::now();
      cpu_start_ = thread_cpu_seconds();
      active_ = true;
    }
  }
  ~Scope() {
    if (active_) {
      add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
          flops_, thread_cpu_seconds() - cpu_start_);
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::string_view name_;
  double flops_ = 0;
  std::chrono::steady_clock::time_point start_;
  double cpu_start_ = 0;
  bool active_ = false;
};

}  // namespace tessel::profile
