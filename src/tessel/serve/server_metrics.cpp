// SPDX-License-Identifier: Apache-2.0
// Prometheus text exposition of the server's counters, gauges and histograms.
#include "tessel/serve/server_metrics.h"

#include <cmath>
#include <cstdio>

#include "tessel/core/error.h"

namespace tessel::serve {

namespace {

// Latency bounds in seconds: from a fast decode step on an accelerator (1 ms) to a long prefill
// on a busy CPU (minutes).
const std::vector<double> kFirstTokenBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                               0.1,   0.25,  0.5,  0.75, 1.0,  2.5,  5.0,
                                               7.5,   10.0,  20.0, 40.0, 80.0, 160.0};
const std::vector<double> kInterTokenBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                               0.075, 0.1,    0.15,  0.2,  0.3,   0.4,
                                               0.5,   0.75,   1.0,   2.5,  5.0,   10.0};
const std::vector<double> kRequestBounds = {0.1,  0.3,  0.5,  0.8,   1.0,   1.5,  2.0,
                                            2.5,  5.0,  10.0, 15.0,  20.0,  30.0, 60.0,
                                            120., 240., 480., 960.0, 1920.0};

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + "{" + labels + "} " + number(value) + "\n";
}

}  // namespace

std::string prometheus_label_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(bounds_.size() + 1) {
  for (size_t i = 1; i < bounds_.size(); ++i)
    TESSEL_CHECK(bounds_[i - 1] < bounds_[i], "Histogram: bounds must increase, got ",
                 bounds_[i - 1], " then ", bounds_[i]);
}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_nanos_.fetch_add(int64_t(std::llround(value * 1e9)), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

double Histogram::sum() const {
  return double(sum_nanos_.load(std::memory_order_relaxed)) * 1e-9;
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::string out;
  const std::string prefix = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    const double le = i < bounds_.size() ? bounds_[i] : INFINITY;
    sample(out, name + "_bucket", prefix + "le=\"" + number(le) + "\"", double(cumulative));
  }
  sample(out, name + "_sum", labels, sum());
  // _count equals the +Inf bucket, read from the same loads.
  sample(out, name + "_count", labels, double(cumulative));
  return out;
}

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_(kFirstTokenBounds),
      itl_(kInterTokenBounds),
      e2e_(kRequestBounds) {}

void ServerMetrics::count_response(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++responses_[{endpoint, status}];
}

uint64_t ServerMetrics::responses(const std::string& endpoint, int status) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = responses_.find({endpoint, status});
  return it == responses_.end() ? 0 : it->second;
}

void ServerMetrics::count_finished_choice(FinishReason reason) {
  finished_[size_t(reason)].fetch_add(1, std::memory_order_relaxed);
}

std::string ServerMetrics::render(const EngineStats& s) const {
  const std::string model = "model_name=\"" + prometheus_label_value(model_name_) + "\"";
  std::string out;
  auto gauge = [&](const char* name, const char* help, double value) {
    header(out, std::string("tessel:") + name, "gauge", help);
    sample(out, std::string("tessel:") + name, model, value);
  };
  auto counter = [&](const char* name, const char* help, double value) {
    header(out, std::string("tessel:") + name, "counter", help);
    sample(out, std::string("tessel:") + name, model, value);
  };
  header(out, "tessel:http_requests_total", "counter",
         "HTTP requests answered, by endpoint and status code.");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, n] : responses_) {
      sample(out, "tessel:http_requests_total",
             model + ",endpoint=\"" + prometheus_label_value(key.first) + "\",code=\"" +
                 std::to_string(key.second) + "\"",
             double(n));
    }
  }
  header(out, "tessel:request_success_total", "counter",
         "Choices finished, by finish reason (cancelled: the client went away).");
  for (FinishReason r : {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled,
                         FinishReason::kError}) {
    sample(out, "tessel:request_success_total",
           model + ",finished_reason=\"" + std::string(finish_reason_name(r)) + "\"",
           double(finished_[size_t(r)].load(std::memory_order_relaxed)));
  }
  counter("prompt_tokens_total", "Prompt tokens processed by the engine.", double(s.prompt_tokens));
  counter("generation_tokens_total", "Tokens generated by the engine.", double(s.generated_tokens));
  gauge("num_requests_running", "Sequences in the running batch.", double(s.running));
  gauge("num_requests_waiting", "Sequences waiting to be scheduled.", double(s.waiting));
  gauge("num_requests_swapped", "Sequences preempted and waiting to be recomputed.",
        double(s.swapped_out));
  gauge("http_streams_active", "Streaming responses being written.",
        double(streams_.load(std::memory_order_relaxed)));
  gauge("kv_cache_blocks_used", "KV-cache blocks in use.", double(s.kv_blocks_used));
  gauge("kv_cache_blocks_free", "KV-cache blocks free.",
        double(s.kv_blocks_total - s.kv_blocks_used));
  gauge("kv_cache_usage_perc", "Fraction of the KV-cache blocks in use (0-1).",
        s.kv_blocks_total > 0 ? double(s.kv_blocks_used) / double(s.kv_blocks_total) : 0.0);
  gauge("kv_cache_block_size", "Tokens per KV-cache block.", double(s.kv_block_size));
  gauge("engine_step_peak_bytes",
        "Host allocator peak of the largest engine step above what was held before it.",
        double(s.step_peak_bytes));
  counter("prefix_cache_queries_total", "Prompt blocks looked up in the prefix cache.",
          double(s.prefix_queries));
  counter("prefix_cache_hits_total", "Prompt blocks found in the prefix cache.",
          double(s.prefix_hits));
  gauge("prefix_cache_hit_rate", "prefix_cache_hits_total / prefix_cache_queries_total (0-1).",
        s.prefix_queries > 0 ? double(s.prefix_hits) / double(s.prefix_queries) : 0.0);
  counter("num_preemptions_total", "Sequences preempted for KV-cache blocks (recomputed later).",
          double(s.preemptions));
  counter("engine_steps_total", "Engine steps (forward passes over a batch).", double(s.steps));
  gauge("engine_alive", "1 while the engine thread runs its loop, 0 once it stopped.",
        s.engine_alive ? 1.0 : 0.0);
  gauge("engine_busy_seconds",
        "How long the engine has been inside its current step (0 while it waits for work).",
        s.busy_seconds);
  header(out, "tessel:time_to_first_token_seconds", "histogram",
         "From a request's arrival at the server to its first generated token.");
  out += ttft_.render("tessel:time_to_first_token_seconds", model);
  header(out, "tessel:inter_token_latency_seconds", "histogram",
         "Between consecutive generated tokens of a choice.");
  out += itl_.render("tessel:inter_token_latency_seconds", model);
  header(out, "tessel:e2e_request_latency_seconds", "histogram",
         "From a request's arrival to its last token, for requests that finished.");
  out += e2e_.render("tessel:e2e_request_latency_seconds", model);
  return out;
}

}  // namespace tessel::serve
