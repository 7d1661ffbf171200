// SPDX-License-Identifier: Apache-2.0
// Repeats a piece of work until a time budget is spent and reports the median and best time.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace tessel::cli {

struct Timing {
  double median_s = 0;
  double best_s = 0;
  int runs = 0;
};

inline Timing time_it(const std::function<void()>& work, double budget_s = 0.5, int min_runs = 3) {
  using Clock = std::chrono::steady_clock;
  work();  // warm-up: page faults, primitive creation, caches
  std::vector<double> times;
  auto start = Clock::now();
  while (int(times.size()) < min_runs ||
         std::chrono::duration<double>(Clock::now() - start).count() < budget_s) {
    auto t0 = Clock::now();
    work();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (times.size() >= 10000) break;
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front(), int(times.size())};
}

}  // namespace tessel::cli
