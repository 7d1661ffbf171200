// SPDX-License-Identifier: Apache-2.0
// Totals of the scoped timers of profile.h, one map entry per name.
#include "tessel/core/profile.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace tessel::profile {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

struct Totals {
  std::mutex mutex;
  std::unordered_map<std::string, Entry> by_name;
};

Totals& totals() {
  static Totals t;
  return t;
}

}  // namespace

void set_enabled(bool on) {
  detail::g_enabled.store(on, std::memory_order_relaxed);
}

void add(std::string_view name, double seconds, double flops, double cpu_seconds) {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.by_name.find(std::string(name));
  if (it == t.by_name.end())
    it = t.by_name.emplace(std::string(name), Entry{std::string(name)}).first;
  it->second.calls += 1;
  it->second.seconds += seconds;
  it->second.flops += flops;
  it->second.cpu_seconds += cpu_seconds;
}

std::vector<Entry> snapshot() {
  Totals& t = totals();
  std::vector<Entry> out;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    for (const auto& [name, e] : t.by_name) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.name < b.name;
  });
  return out;
}

void reset() {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.by_name.clear();
}

}  // namespace tessel::profile
