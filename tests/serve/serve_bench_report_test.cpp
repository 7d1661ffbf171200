// SPDX-License-Identifier: Apache-2.0
// Run figures of `tessel bench serve` from hand-made request records: TTFT, TPOT (latency after
// the first token over the tokens after it), ITL (gaps between chunks), throughput over the run's
// span, errors by kind, and which token count stands for a request's output.
#include "tessel/serve/serve_bench_report.h"

#include <gtest/gtest.h>

namespace tessel::serve {
namespace {

constexpr double kTol = 1e-12;

RequestRecord streamed(double start, double end, std::vector<double> token_times, int64_t tokens) {
  RequestRecord r;
  r.start_s = start;
  r.end_s = end;
  r.token_times_s = std::move(token_times);
  r.chunks = int64_t(r.token_times_s.size());
  r.usage = Usage{10, tokens};
  r.max_tokens = tokens;
  r.planned_prompt_tokens = 10;
  return r;
}

TEST(ServeBenchReport, TpotExcludesTheFirstToken) {
  // 5 tokens, first after 0.5 s, done after 2.5 s: (2.5 - 0.5) / 4.
  const RequestRecord r = streamed(1.0, 3.5, {0.5, 1.0, 1.5, 2.0, 2.5}, 5);
  ASSERT_TRUE(time_per_output_token(r));
  EXPECT_NEAR(*time_per_output_token(r), 0.5, kTol);
  // One token, or no streamed tokens: no TPOT.
  EXPECT_FALSE(time_per_output_token(streamed(0, 1, {0.7}, 1)));
  EXPECT_FALSE(time_per_output_token(streamed(0, 1, {}, 9)));
}

TEST(ServeBenchReport, FiguresOfARunWithAFailure) {
  std::vector<RequestRecord> rs;
  rs.push_back(streamed(0.0, 2.0, {0.25, 0.75, 2.0}, 3));     // ITL 0.5, 1.25; TPOT 0.875
  rs.push_back(streamed(1.0, 4.0, {1.0, 1.5, 2.5, 3.0}, 6));  // 6 tokens in 4 chunks
  RequestRecord failed;
  failed.start_s = 0.5;
  failed.end_s = 0.6;
  failed.error = "http_429";
  rs.push_back(failed);
  RequestRecord cut = streamed(3.0, 5.0, {0.1}, 1);
  cut.error = "incomplete_stream";
  rs.push_back(cut);
  const RunFigures f = run_figures(rs);
  EXPECT_EQ(f.completed, 2);
  EXPECT_EQ(f.failed, 2);
  EXPECT_EQ(f.errors, (std::map<std::string, int64_t>{{"http_429", 1}, {"incomplete_stream", 1}}));
  EXPECT_NEAR(f.duration_s, 5.0, kTol);  // first start 0 to last end 5, failures included
  EXPECT_NEAR(f.requests_per_s, 2.0 / 5.0, kTol);
  EXPECT_EQ(f.output_tokens, 9);
  EXPECT_EQ(f.prompt_tokens, 20);
  EXPECT_NEAR(f.output_tokens_per_s, 9.0 / 5.0, kTol);
  EXPECT_NEAR(f.total_tokens_per_s, 29.0 / 5.0, kTol);
  EXPECT_EQ(f.ttft_s.count, 2);
  EXPECT_NEAR(f.ttft_s.mean, 0.625, kTol);
  EXPECT_EQ(f.itl_s.count, 5);  // 2 + 3 gaps
  EXPECT_NEAR(f.itl_s.max, 1.25, kTol);
  EXPECT_NEAR(f.itl_s.p50, 0.5, kTol);  // {0.5, 0.5, 0.5, 1.0, 1.25}
  EXPECT_EQ(f.tpot_s.count, 2);
  EXPECT_NEAR(f.tpot_s.min, (3.0 - 1.0) / 5.0, kTol);
  EXPECT_NEAR(f.tpot_s.max, (2.0 - 0.25) / 2.0, kTol);
  EXPECT_NEAR(f.latency_s.mean, 2.5, kTol);
  EXPECT_EQ(f.server_completion_tokens, 9);
  EXPECT_EQ(f.client_chunks, 7);
  EXPECT_EQ(f.with_usage, 2);
  EXPECT_EQ(f.ttft_histogram.total(), 2);
}

TEST(ServeBenchReport, OutputTokensFallBackFromUsageToClientCountToChunks) {
  RequestRecord r = streamed(0, 1, {0.1, 0.2, 0.3}, 7);
  EXPECT_EQ(r.output_tokens(), 7);
  EXPECT_EQ(r.prompt_tokens(), 10);
  r.usage.reset();
  EXPECT_EQ(r.output_tokens(), 3);   // the chunks
  EXPECT_EQ(r.prompt_tokens(), 10);  // the planned prompt
  r.client_tokens = 5;
  EXPECT_EQ(r.output_tokens(), 5);
  r.planned_prompt_tokens = -1;
  EXPECT_EQ(r.prompt_tokens(), 0);
  const RunFigures none = run_figures({});
  EXPECT_EQ(none.completed, 0);
  EXPECT_EQ(none.requests_per_s, 0.0);
}

}  // namespace
}  // namespace tessel::serve
