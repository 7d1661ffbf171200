// SPDX-License-Identifier: Apache-2.0
// OpenAI's response shapes built from deltas: whole responses, logprobs in both shapes (including
// a token that holds only part of a UTF-8 character), the stream's chunks and its end, error
// objects; and the Prometheus text of the metrics.
#include "tessel/serve/openai_response.h"

#include <gtest/gtest.h>

#include "tessel/serve/server_metrics.h"

namespace tessel::serve {
namespace {

using nlohmann::json;

// Token i spells byte i; 300 and 301 are the euro sign's UTF-8 bytes split in two tokens.
std::string bytes_of(int64_t id) {
  if (id == 300) return "\xe2\x82";
  if (id == 301) return "\xac";
  return std::string(1, char(id));
}

std::vector<json> events_of(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_EQ(sse.compare(pos, 6, "data: "), 0) << sse.substr(pos);
    const std::string data = sse.substr(pos + 6, end - pos - 6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end + 2;
  }
  return out;
}

TEST(OpenAiResponse, ErrorObject) {
  EXPECT_EQ(error_json(ApiError(400, "n: 9 too many", "invalid_request_error", "n")),
            json::parse(R"({"error": {"message": "n: 9 too many", "type": "invalid_request_error",
                                      "param": "n", "code": null}})"));
  EXPECT_EQ(error_json(ApiError(404, "no", "invalid_request_error", "",
                                "model_not_found"))["error"]["param"],
            nullptr);
}

TEST(OpenAiResponse, CompletionLogprobsOfSplitCharacters) {
  int64_t offset = 4;
  const json lp = completion_logprobs(
      {{'a', -0.5, {{'a', -0.5}, {'b', -1.5}}}, {300, -1.0, {}}, {301, -2.0, {}}, {'c', -3.0, {}}},
      bytes_of, offset);
  EXPECT_EQ(lp["tokens"], json({"a", "bytes:\\xe2\\x82", "bytes:\\xac", "c"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.5, -1.0, -2.0, -3.0}));
  EXPECT_EQ(lp["top_logprobs"][0], json({{"a", -0.5}, {"b", -1.5}}));
  EXPECT_EQ(lp["top_logprobs"][1], json::object());
  // Offsets count characters: the euro sign's two tokens are one character together.
  EXPECT_EQ(lp["text_offset"], json({4, 5, 6, 6}));
  EXPECT_EQ(offset, 7);
}

TEST(OpenAiResponse, ChatLogprobsCarryBytes) {
  const json lp = chat_logprobs({{300, -1.0, {{300, -1.0}, {'x', -2.0}}}}, bytes_of);
  const json& t = lp["content"][0];
  EXPECT_EQ(t["token"], "bytes:\\xe2\\x82");
  EXPECT_EQ(t["bytes"], json({0xe2, 0x82}));
  EXPECT_EQ(t["top_logprobs"][1], json({{"token", "x"}, {"logprob", -2.0}, {"bytes", {'x'}}}));
}

TEST(OpenAiResponse, WholeChatResponse) {
  ResponseHead head{"chatcmpl-1", Endpoint::kChat, 1700000000, "m"};
  ChoiceOutput c{"Hi!", {'H', 'i', '!'}, {}, FinishReason::kStop};
  const json r = full_response(head, {c}, {5, 3}, false, bytes_of);
  EXPECT_EQ(r, json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion",
      "created": 1700000000, "model": "m",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi!"},
                   "logprobs": null, "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})"));
}

TEST(OpenAiResponse, StreamChunksInOrder) {
  ResponseHead head{"cmpl-7", Endpoint::kCompletions, 1700000000, "m"};
  StreamEncoder enc(head, 2, true, true, "P:", bytes_of);
  Delta d0;
  d0.index = 1;
  d0.text = "ab";
  d0.tokens = {'a', 'b'};
  d0.logprobs = {{'a', -1, {}}, {'b', -2, {}}};
  std::string sse = enc.encode(d0);
  Delta last;
  last.index = 1;
  last.finish = FinishReason::kLength;
  sse += enc.encode(last);
  Delta cancelled;
  cancelled.index = 0;
  cancelled.finish = FinishReason::kCancelled;
  EXPECT_EQ(enc.encode(cancelled), "");  // never shown to a client
  sse += enc.finish({3, 2});
  const std::vector<json> events = events_of(sse);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0]["choices"][0]["text"], "P:");  // the echoed prompt first
  EXPECT_EQ(events[1]["choices"][0]["text"], "ab");
  EXPECT_EQ(events[1]["choices"][0]["logprobs"]["text_offset"], json({2, 3}));
  EXPECT_TRUE(events[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(events[1]["usage"].is_null());
  EXPECT_EQ(events[1]["object"], "text_completion");
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events[3]["choices"], json::array());
  EXPECT_EQ(events[3]["usage"]["total_tokens"], 5);
  EXPECT_EQ(events[4], "[DONE]");
  const std::vector<json> failed =
      events_of(StreamEncoder::error(ApiError(500, "boom", "server_error")));
  EXPECT_EQ(failed[0]["error"]["message"], "boom");
  EXPECT_EQ(failed[1], "[DONE]");
}

TEST(OpenAiResponse, InvalidUtf8IsReplacedWhenDumped) {
  EXPECT_EQ(dump_json(json{{"t", std::string("a\xe2\x82")}}), "{\"t\":\"a\xef\xbf\xbd\"}");
}

TEST(ServerMetrics, HistogramIsCumulativeWithInf) {
  Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 7.0}) h.observe(v);
  EXPECT_EQ(h.render("x", "a=\"b\""),
            "x_bucket{a=\"b\",le=\"0.10000000000000001\"} 2\n"
            "x_bucket{a=\"b\",le=\"1\"} 3\n"
            "x_bucket{a=\"b\",le=\"+Inf\"} 4\n"
            "x_sum{a=\"b\"} 7.6500000000000004\n"
            "x_count{a=\"b\"} 4\n");
}

TEST(ServerMetrics, ExpositionFormat) {
  ServerMetrics m("my \"model\"");
  m.count_response("/v1/completions", 200);
  m.count_response("/v1/completions", 200);
  m.count_response("other", 404);
  m.count_finished_choice(FinishReason::kStop);
  m.observe_time_to_first_token(0.2);
  EngineStats s;
  s.running = 3;
  s.waiting = 2;
  s.kv_blocks_total = 10;
  s.kv_blocks_used = 4;
  s.prefix_queries = 0;
  const std::string text = m.render(s);
  const std::string model = "model_name=\"my \\\"model\\\"\"";
  for (const std::string& line :
       {"tessel:http_requests_total{" + model + ",endpoint=\"/v1/completions\",code=\"200\"} 2",
        "tessel:http_requests_total{" + model + ",endpoint=\"other\",code=\"404\"} 1",
        "tessel:request_success_total{" + model + ",finished_reason=\"stop\"} 1",
        "tessel:num_requests_running{" + model + "} 3",
        "tessel:num_requests_waiting{" + model + "} 2",
        "tessel:kv_cache_blocks_free{" + model + "} 6",
        "tessel:kv_cache_usage_perc{" + model + "} 0.40000000000000002",
        "tessel:prefix_cache_hit_rate{" + model + "} 0",
        "tessel:time_to_first_token_seconds_count{" + model + "} 1",
        std::string("# TYPE tessel:num_preemptions_total counter")}) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << "\n" << text;
  }
  // Every sample line belongs to a metric declared by # TYPE before it.
  std::string declared;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("# TYPE ", 0) == 0) {
      declared = line.substr(7, line.find(' ', 7) - 7);
    } else if (line[0] != '#') {
      EXPECT_EQ(line.rfind(declared, 0), 0u) << line;
    }
  }
}

}  // namespace
}  // namespace tessel::serve
