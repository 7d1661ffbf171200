// SPDX-License-Identifier: Apache-2.0
#include "tessel/dist/comm_time.h"

#include <unordered_map>

namespace tessel::dist {
namespace {

std::unordered_map<std::string, int64_t>& totals() {
  thread_local std::unordered_map<std::string, int64_t> by_label;
  return by_label;
}

}  // namespace

void add_blocking_time(const std::string& label, int64_t ns) {
  totals()[label] += ns;
}

double blocking_ms(const std::string& label) {
  const auto it = totals().find(label);
  return it == totals().end() ? 0.0 : double(it->second) / 1e6;
}

}  // namespace tessel::dist
