// SPDX-License-Identifier: Apache-2.0
// A small profiler: named scoped timers aggregated per name (calls, wall seconds, the calling
// thread's CPU seconds, and the FLOPs the caller says the work did). The CPU seconds are what a
// scope cost on a machine shared with other work, where the wall clock also counts the waits for
// a core; with one compute thread they are the scope's whole work (with a pool, the workers' share
// is not in them). Off by default; while off a Scope costs one relaxed atomic
// load and a branch, so kernels can carry scopes permanently. Meant for the thread that issues the
// kernels (the kernels themselves parallelise inside the scope); totals are guarded by a mutex, so
// scopes on other threads are safe too, only slower.
#pragma once

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
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
  double cpu_seconds = 0;  // the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID)
};

// This thread's CPU seconds so far.
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// Adds one call of `seconds` (and `flops`, and `cpu_seconds`) to `name`'s totals.
void add(std::string_view name, double seconds, double flops = 0, double cpu_seconds = 0);
// All totals since the last reset, largest time first.
std::vector<Entry> snapshot();
void reset();
// Switches profiling on and prints the totals (the `limit` largest, with their share and rate) to
// stderr when the process exits, under `title`: how TESSEL_PROFILE=1 (the CPU backend) and
// TESSEL_CUDA_PROFILE=1 (the CUDA backend) break a whole run down. Once per process.
void report_at_exit(const char* title, int limit = 40);
// The table report_at_exit prints, from `entries`.
std::string format_report(const std::vector<Entry>& entries, const char* title, int limit);

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
