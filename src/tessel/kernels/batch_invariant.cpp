// SPDX-License-Identifier: Apache-2.0
// The process-wide batch-invariant switch (batch_invariant.h); the kernels read it per call.
#include "tessel/kernels/batch_invariant.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "tessel/core/error.h"

namespace tessel::kernels {

namespace {

bool from_environment() {
  const char* v = std::getenv("TESSEL_BATCH_INVARIANT");
  const std::string s = v ? v : "";
  if (s.empty() || s == "0" || s == "off" || s == "false") return false;
  TESSEL_CHECK(s == "1" || s == "on" || s == "true", "TESSEL_BATCH_INVARIANT = '", s,
               "', expected 1, on, true, 0, off or false");
  return true;
}

std::atomic<bool>& mode() {
  static std::atomic<bool> on{from_environment()};
  return on;
}

}  // namespace

bool batch_invariant() {
  return mode().load(std::memory_order_relaxed);
}

void set_batch_invariant(bool on) {
  mode().store(on, std::memory_order_relaxed);
}

BatchInvariantScope::BatchInvariantScope(bool on) : previous_(batch_invariant()) {
  set_batch_invariant(on);
}

BatchInvariantScope::~BatchInvariantScope() {
  set_batch_invariant(previous_);
}

}  // namespace tessel::kernels
