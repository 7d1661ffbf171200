// SPDX-License-Identifier: Apache-2.0
// Timing helpers of `tessel plan calibrate` (internal to plan/): the median of repeated calls,
// each made in the cache state a training step's kernels see (CacheEviction). Medians, not best
// runs: the cost model should predict what a step sees on a machine shared with other work, and
// one lucky repetition must not set a rate.
#pragma once

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "tessel/core/threads.h"

namespace tessel::plan::calibration {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// CPU seconds the process has used, all its threads together.
inline double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Bytes of a core's private caches (L1 data + L2), from the C library; 2 MiB when it does not say.
inline int64_t private_cache_bytes() {
  int64_t bytes = 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
  bytes += std::max<long>(0, sysconf(_SC_LEVEL1_DCACHE_SIZE));
  bytes += std::max<long>(0, sysconf(_SC_LEVEL2_CACHE_SIZE));
#endif
  return bytes > 0 ? bytes : int64_t(2) << 20;
}

// Puts a kernel's operands where a training step finds them: written by earlier kernels, so out
// of the private caches of the cores that run it (but, for a step whose working set fits the
// shared last-level cache, still in it). Repeating one call on the same tensors keeps them in L1
// and L2 instead, and a kernel calibrated that way runs faster than inside a step (the phase
// breakdown in docs/PLANNER.md, "Step time"). `evict()` writes a buffer of twice the private
// caches of every pool thread, each thread its own share, so each core's L1 and L2 hold only it.
class CacheEviction {
 public:
  explicit CacheEviction(int64_t bytes_per_thread = 2 * private_cache_bytes())
      : per_thread_(std::max<int64_t>(1, bytes_per_thread / 4)),
        n_(per_thread_ * std::max(1, num_threads())),
        buffer_(new float[size_t(n_)]) {}
  int64_t bytes() const { return 4 * n_; }
  void evict() {
    float* p = buffer_.get();
    const float v = float(++generation_);
    parallel_for(0, n_, per_thread_, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) p[i] = v;
    });
  }

 private:
  int64_t per_thread_, n_;
  std::unique_ptr<float[]> buffer_;
  int generation_ = 0;
};

// Median seconds of `fn` over repetitions filling about `budget` seconds (at least 3), `before`
// run untimed ahead of each call (CacheEviction::evict; nothing by default). Each call counts the
// shorter of its wall time and the process's CPU time over its threads: on a machine shared with
// more runnable work than cores a call longer than a time slice waits for the CPU, and that wait
// is the load (cpu_share), not the kernel's cost.
inline void no_preparation() {}
template <typename Fn, typename Before = void (*)()>
double median_time(const Fn& fn, double budget, const Before& before = no_preparation) {
  fn();  // warm-up: first touch, the library's kernel choice
  std::vector<double> times;
  const double threads = double(num_threads());
  const auto start = Clock::now();
  while (times.size() < 3 || (seconds_since(start) < budget && times.size() < 10000)) {
    before();
    const auto t0 = Clock::now();
    const double c0 = process_cpu_seconds();
    fn();
    const double cpu = (process_cpu_seconds() - c0) / threads;
    const double wall = seconds_since(t0);
    times.push_back(cpu > 0 ? std::min(wall, cpu) : wall);
  }
  return median(times);
}

// The share of the wall clock this process's threads get while every rank keeps its cores busy
// with `fn` for about `seconds`: CPU seconds over threads over wall seconds, at most 1.
template <typename Fn>
double cpu_share(const Fn& fn, double seconds) {
  const auto t0 = Clock::now();
  const double c0 = process_cpu_seconds();
  while (seconds_since(t0) < seconds) fn();
  const double wall = seconds_since(t0);
  return std::min(1.0, (process_cpu_seconds() - c0) / double(num_threads()) / wall);
}

}  // namespace tessel::plan::calibration
