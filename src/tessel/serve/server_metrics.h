// SPDX-License-Identifier: Apache-2.0
// The server's /metrics in the Prometheus text exposition format (version 0.0.4): what the front
// end measures itself (responses by endpoint and status, time to first token from a request's
// arrival, inter-token latency between deltas, end-to-end latency, finished choices by reason)
// and the engine's snapshot (EngineStats: queue, running sequences, KV blocks, prefix cache,
// preemptions, token totals). Names follow vLLM's where the meaning is the same, with the prefix
// "tessel:" and the label model_name (docs/SERVING.md, "Metrics").
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tessel/serve/request.h"

namespace tessel::serve {

// A cumulative histogram with fixed upper bounds; observe() is lock-free so that the engine's
// thread can record latencies without waiting for an HTTP thread.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const;
  // "<name>_bucket{<labels>,le="..."} n" lines (cumulative, ending with +Inf), _sum and _count.
  std::string render(const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> buckets_;  // per bound, not cumulative; the last is +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> sum_nanos_{0};  // the sum in 1e-9 units, so it can be atomic
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // One answered HTTP request (endpoint such as "/v1/completions"; "other" for unknown routes).
  void count_response(const std::string& endpoint, int status);
  void observe_time_to_first_token(double seconds) { ttft_.observe(seconds); }
  void observe_inter_token_latency(double seconds) { itl_.observe(seconds); }
  void observe_request_latency(double seconds) { e2e_.observe(seconds); }
  void count_finished_choice(FinishReason reason);
  void stream_opened() { ++streams_; }
  void stream_closed() { --streams_; }

  // The whole exposition, the engine's figures from `engine`.
  std::string render(const EngineStats& engine) const;

  const Histogram& time_to_first_token() const { return ttft_; }
  const Histogram& inter_token_latency() const { return itl_; }
  uint64_t responses(const std::string& endpoint, int status) const;

 private:
  std::string model_name_;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> responses_;
  std::array<std::atomic<uint64_t>, 5> finished_{};  // by FinishReason
  std::atomic<int64_t> streams_{0};
  Histogram ttft_, itl_, e2e_;
};

// `value` as a Prometheus label value: backslash, double quote and newline escaped.
std::string prometheus_label_value(const std::string& value);

}  // namespace tessel::serve
