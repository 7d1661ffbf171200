// SPDX-License-Identifier: Apache-2.0
// Signal handlers that only store to a lock-free atomic (async-signal-safe).
#include "tessel/train/stop_signal.h"

#include <atomic>
#include <csignal>

namespace tessel::train {

namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
  // The next Ctrl-C is not caught: an impatient user can always end the process.
  if (sig == SIGINT) std::signal(SIGINT, SIG_DFL);
}

}  // namespace

void install_stop_handlers() {
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

void remove_stop_handlers() {
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
}

bool stop_requested() {
  return g_signal.load() != 0;
}
int stop_signal() {
  return g_signal.load();
}
void request_stop(int sig) {
  g_signal.store(sig);
}

}  // namespace tessel::train
