// SPDX-License-Identifier: Apache-2.0
// Totals of the scoped timers of profile.h, one map entry per name.
#include "tessel/core/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

std::string format_report(const std::vector<Entry>& entries, const char* title, int limit) {
  double total = 0;
  for (const Entry& e : entries) total += e.seconds;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "tessel: %s: %.1f ms in %zu kinds of call\n", title, total * 1e3,
                entries.size());
  out += line;
  for (size_t i = 0; i < entries.size() && int(i) < limit; ++i) {
    const Entry& e = entries[i];
    const std::string rate =
        e.flops > 0 && e.seconds > 0
            ? " " + std::to_string(int64_t(e.flops / e.seconds / 1e9)) + " GFLOP/s"
            : std::string();
    std::snprintf(line, sizeof line, "  %9.2f ms %5.1f%% %7lld calls  %s%s\n", e.seconds * 1e3,
                  total > 0 ? 100.0 * e.seconds / total : 0.0, static_cast<long long>(e.calls),
                  e.name.c_str(), rate.c_str());
    out += line;
  }
  return out;
}

void report_at_exit(const char* title, int limit) {
  static std::once_flag once;
  std::call_once(once, [title, limit] {
    // The totals exist before the handler is registered, so they are destroyed after it runs.
    (void)totals();
    static const char* t = title;
    static int n = limit;
    std::atexit([] { std::fputs(format_report(snapshot(), t, n).c_str(), stderr); });
    set_enabled(true);
  });
}

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
