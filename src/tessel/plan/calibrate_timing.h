// SPDX-License-Identifier: Apache-2.0
// Timing helpers of `tessel plan calibrate` (internal to plan/): the median of repeated calls.
// Medians, not best runs: the cost model should predict what a step sees on a machine shared
// with other work, and one lucky repetition must not set a rate.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
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

// Median seconds of `fn` over repetitions filling about `budget` seconds (at least 3). Each call
// counts the shorter of its wall time and the process's CPU time over its threads: on a machine
// shared with more runnable work than cores a call longer than a time slice waits for the CPU,
// and that wait is the load (cpu_share), not the kernel's cost.
template <typename Fn>
double median_time(const Fn& fn, double budget) {
  fn();  // warm-up: first touch, the library's kernel choice
  std::vector<double> times;
  const double threads = double(num_threads());
  const auto start = Clock::now();
  while (times.size() < 3 || (seconds_since(start) < budget && times.size() < 10000)) {
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
