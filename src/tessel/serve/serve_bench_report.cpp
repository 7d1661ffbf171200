// SPDX-License-Identifier: Apache-2.0
// Run figures of `tessel bench serve` from per-request records. TPOT and ITL follow vLLM's
// benchmark_serving definitions: TPOT excludes the first token, ITL is every gap between
// consecutive chunks that carried output.
#include "tessel/serve/serve_bench_report.h"

#include <algorithm>
#include <limits>

namespace tessel::serve {

int64_t RequestRecord::output_tokens() const {
  if (usage) return usage->completion_tokens;
  if (client_tokens >= 0) return client_tokens;
  return chunks;
}

int64_t RequestRecord::prompt_tokens() const {
  if (usage) return usage->prompt_tokens;
  return std::max<int64_t>(planned_prompt_tokens, 0);
}

std::optional<double> time_per_output_token(const RequestRecord& r) {
  const int64_t n = r.output_tokens();
  if (n < 2 || r.token_times_s.empty()) return std::nullopt;
  return (r.latency_s() - r.token_times_s.front()) / double(n - 1);
}

RunFigures run_figures(const std::vector<RequestRecord>& records) {
  RunFigures f;
  std::vector<double> ttft, tpot, itl, latency;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  for (const RequestRecord& r : records) {
    first = std::min(first, r.start_s);
    last = std::max(last, r.end_s);
    if (!r.ok()) {
      ++f.failed;
      ++f.errors[r.error];
      continue;
    }
    ++f.completed;
    latency.push_back(r.latency_s());
    if (!r.token_times_s.empty()) {
      ttft.push_back(r.token_times_s.front());
      f.ttft_histogram.add(r.token_times_s.front());
    }
    for (size_t i = 1; i < r.token_times_s.size(); ++i)
      itl.push_back(r.token_times_s[i] - r.token_times_s[i - 1]);
    if (auto t = time_per_output_token(r)) tpot.push_back(*t);
    f.output_tokens += r.output_tokens();
    f.prompt_tokens += r.prompt_tokens();
    f.requested_output_tokens += r.max_tokens;
    if (r.usage) {
      ++f.with_usage;
      f.server_completion_tokens += r.usage->completion_tokens;
      f.server_prompt_tokens += r.usage->prompt_tokens;
    }
    f.client_chunks += r.chunks;
    if (r.client_tokens >= 0) {
      ++f.with_client_tokens;
      f.client_tokens += r.client_tokens;
    }
    f.planned_prompt_tokens += std::max<int64_t>(r.planned_prompt_tokens, 0);
  }
  f.duration_s = records.empty() ? 0.0 : last - first;
  if (f.duration_s > 0) {
    f.requests_per_s = double(f.completed) / f.duration_s;
    f.output_tokens_per_s = double(f.output_tokens) / f.duration_s;
    f.total_tokens_per_s = double(f.output_tokens + f.prompt_tokens) / f.duration_s;
  }
  f.ttft_s = summarize(ttft);
  f.tpot_s = summarize(tpot);
  f.itl_s = summarize(itl);
  f.latency_s = summarize(latency);
  return f;
}

}  // namespace tessel::serve
