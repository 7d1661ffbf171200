// SPDX-License-Identifier: Apache-2.0
// `tessel bench serve`, shared between its files: the options, the HTTP client that sends one
// workload request and records its timings (bench_serve_client.cpp), the closed- and open-loop
// drivers (bench_serve_run.cpp) and the in-process baseline (bench_serve_baseline.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/serve/serve_bench_openai.h"
#include "tessel/serve/serve_bench_report.h"
#include "tessel/serve/serve_bench_workload.h"

namespace tessel::io {
class Tokenizer;
}
namespace tessel::models {
class CausalLM;
}

namespace tessel::cli {

using BenchClock = std::chrono::steady_clock;

struct ServeBenchOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string model;  // sent in requests; empty: the first id of GET /v1/models
  std::string endpoint = "completions";
  std::string concurrency;  // comma-separated list, one run each (closed loop)
  std::string rate;         // comma-separated list of requests/s, one run each (open loop)
  int64_t requests = 0;     // per run; 0 with no --duration: 8 x the concurrency, or 64
  double duration = 0;      // seconds per run (no new request after it)
  std::string prompt_tokens = "128", output_tokens = "128";
  int64_t shared_prefix_tokens = 0;  // ids every random prompt opens with (a system prompt)
  std::string dataset;
  bool stream = true;
  bool ignore_eos = true;
  double temperature = 0;
  uint64_t seed = 0;
  int64_t warmup = 0;
  std::string local_model;  // -m: tokenizer, vocabulary and the in-process baseline
  std::string tokenizer;    // a tokenizer without a baseline
  int64_t vocab = 0;        // random prompt ids below it; 0: from the model, tokenizer or server
  int64_t baseline_requests = 16;
  double timeout = 600;
  std::string api_key;
  int threads = 0;
};

// Where requests go: "http://host:port" for the client and a path prefix before /v1/...
struct ServeTarget {
  std::string scheme_host_port;
  std::string prefix;
};
ServeTarget parse_base_url(const std::string& url);

struct ClientSettings {
  serve::BenchEndpoint endpoint = serve::BenchEndpoint::kCompletions;
  std::string model;
  bool stream = true, ignore_eos = true;
  double temperature = 0;
  double timeout_s = 600;
  std::string api_key;
  // Text for a prompt of token ids, where the endpoint takes text (chat): the tokenizer's decode.
  std::function<std::string(const std::vector<int64_t>&)> ids_to_text;
};

// One connection per request: a request never waits for another's socket.
class ServeClient {
 public:
  ServeClient(ServeTarget target, ClientSettings settings)
      : target_(std::move(target)), settings_(std::move(settings)) {}
  // Sends `request` now and waits for the whole response; times are from `run_start`.
  serve::RequestRecord send(const serve::BenchRequest& request,
                            BenchClock::time_point run_start) const;
  // GET /v1/models; throws Error naming the URL when the server cannot be reached.
  serve::ModelList models() const;
  const ClientSettings& settings() const { return settings_; }

 private:
  ServeTarget target_;
  ClientSettings settings_;
};

// Closed loop: `concurrency` clients, each sending its next request when the previous ends, until
// `requests` are sent (if > 0) or `duration_s` has passed (if > 0). Request i of the run is
// workload.request(first_index + i).
std::vector<serve::RequestRecord> run_closed_loop(const ServeClient& client,
                                                  const serve::Workload& workload,
                                                  int64_t concurrency, int64_t first_index,
                                                  int64_t requests, double duration_s);
// Open loop: requests start at Poisson arrival times of `rate` per second, whatever is in flight.
std::vector<serve::RequestRecord> run_open_loop(const ServeClient& client,
                                                const serve::Workload& workload, double rate,
                                                uint64_t seed, int64_t first_index,
                                                int64_t requests, double duration_s);

// The same requests through models::generate, one at a time, in this process: TTFT is the
// prompt's forward plus the first token's sampling, each later token's time is when it was chosen.
// Text prompts are encoded with `tokenizer` (required for them).
std::vector<serve::RequestRecord> run_baseline(models::CausalLM& model,
                                               const io::Tokenizer* tokenizer,
                                               const serve::Workload& workload, int64_t first_index,
                                               int64_t count, int64_t vocab_limit,
                                               double temperature);

}  // namespace tessel::cli
