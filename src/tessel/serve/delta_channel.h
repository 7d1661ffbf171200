// SPDX-License-Identifier: Apache-2.0
// The hand-over of one request's deltas from the engine's thread to the HTTP thread that writes
// them: the engine pushes (a short lock, never a wait on the client), the connection's thread
// pops when its socket can take more. The push side also measures, for /metrics, the time to the
// first token (from the request's arrival at the server) and the inter-token latency (between a
// choice's deltas), so the figures do not include time a slow client takes to read.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "tessel/serve/request.h"

namespace tessel::serve {

class ServerMetrics;

class DeltaChannel {
 public:
  using Clock = std::chrono::steady_clock;

  // `metrics` may be null (no latency recorded).
  DeltaChannel(int64_t n, Clock::time_point arrival, ServerMetrics* metrics);

  // Engine thread: queues `delta`.
  void push(const Delta& delta);
  // HTTP thread: the deltas queued so far, waiting up to `timeout` when there are none.
  std::vector<Delta> pop(std::chrono::milliseconds timeout);
  // Every choice has delivered its last delta and all were popped.
  bool finished() const;
  // Seconds from arrival to the first token, once there was one.
  std::optional<double> time_to_first_token() const;
  // Seconds from arrival to the last choice's finish, once all finished.
  std::optional<double> latency() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<Delta> queue_;
  Clock::time_point arrival_;
  ServerMetrics* metrics_;
  std::vector<std::optional<Clock::time_point>> last_token_;  // per choice
  std::optional<Clock::time_point> first_token_, all_finished_;
  int64_t open_choices_;
};

}  // namespace tessel::serve
