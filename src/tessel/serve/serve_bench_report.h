// SPDX-License-Identifier: Apache-2.0
// What `tessel bench serve` records per request and the figures of a run computed from those
// records: throughput, time to first token (TTFT), time per output token (TPOT), inter-token
// latency (ITL), end-to-end latency, errors by kind, and the server's token counts beside the
// client's. The same computation serves the HTTP runs and the in-process baseline, so their
// figures mean the same thing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessel/serve/serve_bench_openai.h"
#include "tessel/serve/serve_bench_stats.h"

namespace tessel::serve {

struct RequestRecord {
  int64_t index = 0;
  // Empty for a success; else the kind of failure: "http_<status>", a transport error
  // ("connection", "read", ...), "incomplete_stream" (no [DONE]), "bad_response", "server_error".
  std::string error;
  std::string error_message;      // the server's or the transport's words, for the log
  double start_s = 0, end_s = 0;  // from the start of the run
  // Seconds from the request's start to each chunk (or token) that carried output; the first is
  // the time to first token. Empty when nothing came back (or the response was not streamed).
  std::vector<double> token_times_s;
  int64_t chunks = 0;          // responses or chunks that carried output text
  std::string text;            // the output text, concatenated
  std::optional<Usage> usage;  // what the server reported
  int64_t client_tokens = -1;  // the output text re-tokenized by the client; -1 without a tokenizer
  int64_t planned_prompt_tokens = -1;  // the workload's prompt length; -1 for a text prompt
  int64_t max_tokens = 0;
  bool ok() const { return error.empty(); }
  double latency_s() const { return end_s - start_s; }
  // Output tokens: the server's usage, else the client's count, else the chunks.
  int64_t output_tokens() const;
  int64_t prompt_tokens() const;  // the server's usage, else the planned length, else 0
};

struct RunFigures {
  int64_t completed = 0, failed = 0;
  std::map<std::string, int64_t> errors;  // failures by kind
  double duration_s = 0;                  // first start to last end
  double requests_per_s = 0, output_tokens_per_s = 0, total_tokens_per_s = 0;
  Summary ttft_s, tpot_s, itl_s, latency_s;
  LatencyHistogram ttft_histogram = LatencyHistogram::latency_seconds();
  // Token counts over the completed requests.
  int64_t output_tokens = 0, prompt_tokens = 0;
  int64_t requested_output_tokens = 0;  // sum of max_tokens
  int64_t server_completion_tokens = 0, server_prompt_tokens = 0, with_usage = 0;
  int64_t client_chunks = 0, client_tokens = 0, with_client_tokens = 0;
  int64_t planned_prompt_tokens = 0;
};

// TPOT of one request: (latency - TTFT) / (output tokens - 1); absent with fewer than two tokens
// or no TTFT.
std::optional<double> time_per_output_token(const RequestRecord& r);

RunFigures run_figures(const std::vector<RequestRecord>& records);

}  // namespace tessel::serve
