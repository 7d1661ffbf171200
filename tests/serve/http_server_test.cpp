// SPDX-License-Identifier: Apache-2.0
// The HTTP front end over loopback: completions and chat, whole and streamed, with n > 1,
// logprobs, stop strings and usage, in OpenAI's shapes; /v1/models, /health, /metrics, and one log
// line per request. The engine behind it is the scripted one, whose output is known exactly.
#include <gtest/gtest.h>

#include "server_fixture.h"
#include "tessel/serve/chat_template.h"

namespace tessel::serve::test {
namespace {

TEST_F(ServerTest, CompletionWholeResponse) {
  const auto [status, r] = post("/v1/completions", {{"model", "tiny"},
                                                    {"prompt", "Hello there"},
                                                    {"max_tokens", 5},
                                                    {"temperature", 0},
                                                    {"seed", 7}});
  ASSERT_EQ(status, 200) << r.dump();
  const std::vector<int64_t> prompt = encode("Hello there");
  EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_GT(r["created"].get<int64_t>(), 1'600'000'000);
  EXPECT_EQ(r["model"], "tiny");
  ASSERT_EQ(r["choices"].size(), 1u);
  const json& c = r["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["text"], expected_text(prompt, 5));
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(r["usage"], json({{"prompt_tokens", prompt.size()},
                              {"completion_tokens", 5},
                              {"total_tokens", prompt.size() + 5}}));
  // What reached the engine.
  const std::vector<Request> sent = engine_->submitted();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].id, r["id"]);
  EXPECT_EQ(sent[0].prompt, prompt);
  EXPECT_EQ(sent[0].params.temperature, 0.0);
  EXPECT_EQ(sent[0].params.max_tokens, 5);
  EXPECT_EQ(sent[0].params.seed, 7u);
}

TEST_F(ServerTest, SeveralChoicesWithLogprobsAndAnAlias) {
  const std::vector<int64_t> prompt = {'a', 'b', 'c', 'd'};
  const auto [status, r] = post(
      "/v1/completions",
      {{"model", "tiny-dir"}, {"prompt", prompt}, {"max_tokens", 3}, {"n", 2}, {"logprobs", 2}});
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["model"], "tiny");
  EXPECT_EQ(r["choices"][0]["text"], "abc");
  EXPECT_EQ(r["choices"][1]["text"], "bcd");
  const json& lp = r["choices"][1]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"b", "c", "d"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.125, -0.25, -0.375}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2}));
  EXPECT_EQ(lp["top_logprobs"][0], json({{"b", -0.125}, {"c", -1.125}}));
  EXPECT_EQ(r["usage"]["completion_tokens"], 6);
}

TEST_F(ServerTest, StopStringsEchoAndStopTokens) {
  auto [status, r] =
      post("/v1/completions", {{"prompt", "xyzxyz"}, {"max_tokens", 6}, {"stop", {"zx"}}});
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"], "xy");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  std::tie(status, r) =
      post("/v1/completions", {{"prompt", "pq"}, {"max_tokens", 3}, {"echo", true}});
  EXPECT_EQ(r["choices"][0]["text"], "pqpqp");
  std::tie(status, r) =
      post("/v1/completions",
           {{"prompt", {'m', 'n', 'o'}}, {"max_tokens", 3}, {"stop_token_ids", {'o'}}});
  EXPECT_EQ(r["choices"][0]["text"], "mn");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerTest, ChatWholeResponseWithLogprobs) {
  const auto [status, r] =
      post("/v1/chat/completions",
           {{"model", "tiny"},
            {"messages",
             {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "Hi"}}}},
            {"max_completion_tokens", 4},
            {"logprobs", true},
            {"top_logprobs", 1}});
  ASSERT_EQ(status, 200) << r.dump();
  const std::vector<int64_t> prompt = encode("system: S\nuser: Hi\nassistant:");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r["object"], "chat.completion");
  const json& c = r["choices"][0];
  EXPECT_EQ(c["message"], json({{"role", "assistant"}, {"content", expected_text(prompt, 4)}}));
  EXPECT_EQ(c["finish_reason"], "length");
  const json& first = c["logprobs"]["content"][0];
  EXPECT_EQ(first["token"], "s");
  EXPECT_EQ(first["logprob"], -0.125);
  EXPECT_EQ(first["bytes"], json({int('s')}));
  EXPECT_EQ(first["top_logprobs"],
            json::array({{{"token", "s"}, {"logprob", -0.125}, {"bytes", {int('s')}}}}));
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt.size());
}

TEST_F(ServerTest, ChatThroughAChatTemplate) {
  const ChatTemplate chatml = ChatTemplate::fallback();
  const ChatTemplate refusing =
      ChatTemplate::from_source("{{ raise_exception('only one turn, please') }}", "", "");
  ServerOptions options;
  options.render_chat = [&](const std::vector<ChatMessage>& m, bool generation_prompt) {
    return (m.size() == 1 ? chatml : refusing).render(m, generation_prompt);
  };
  start({}, options);
  const json user = {{"role", "user"}, {"content", "Hi"}};
  const auto [status, r] = post("/v1/chat/completions", {{"messages", {user}}, {"max_tokens", 2}});
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(engine_->submitted().size(), 1u);
  EXPECT_EQ(engine_->submitted()[0].prompt, encode(chatml.render({{"user", "Hi"}}, true)));
  const auto refused = post("/v1/chat/completions", {{"messages", {user, user}}});
  expect_error(refused, 400, "invalid_request_error");
  EXPECT_NE(refused.second["error"]["message"].get<std::string>().find("only one turn, please"),
            std::string::npos)
      << refused.second.dump();
}

TEST_F(ServerTest, StreamedCompletionEqualsTheWholeOne) {
  httplib::Client c = client();
  const json body = {{"prompt", "Hello there"},
                     {"max_tokens", 6},
                     {"n", 2},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  const httplib::Result res = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const SseEvents sse = parse_sse(res->body);
  EXPECT_TRUE(sse.done);
  ASSERT_GE(sse.events.size(), 2u);
  std::string text[2];
  std::string finish[2];
  for (size_t i = 0; i + 1 < sse.events.size(); ++i) {
    const json& e = sse.events[i];
    EXPECT_EQ(e["object"], "text_completion");
    EXPECT_TRUE(e["usage"].is_null());
    ASSERT_EQ(e["choices"].size(), 1u);
    const json& choice = e["choices"][0];
    const int index = choice["index"];
    EXPECT_TRUE(finish[index].empty()) << "a chunk after the choice finished";
    text[index] += choice["text"].get<std::string>();
    if (!choice["finish_reason"].is_null()) finish[index] = choice["finish_reason"];
  }
  const std::vector<int64_t> prompt = encode("Hello there");
  EXPECT_EQ(text[0], expected_text(prompt, 6, 0));
  EXPECT_EQ(text[1], expected_text(prompt, 6, 1));
  EXPECT_EQ(finish[0], "length");
  EXPECT_EQ(finish[1], "length");
  const json& last = sse.events.back();
  EXPECT_EQ(last["choices"], json::array());
  EXPECT_EQ(last["usage"], json({{"prompt_tokens", prompt.size()},
                                 {"completion_tokens", 12},
                                 {"total_tokens", prompt.size() + 12}}));
}

TEST_F(ServerTest, StreamedChatOpensWithTheRole) {
  httplib::Client c = client();
  const json body = {
      {"messages", {{{"role", "user"}, {"content", "abc"}}}}, {"max_tokens", 3}, {"stream", true}};
  const httplib::Result res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  const SseEvents sse = parse_sse(res->body);
  EXPECT_TRUE(sse.done);
  ASSERT_GE(sse.events.size(), 2u);
  EXPECT_EQ(sse.events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(sse.events[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  std::string text;
  for (size_t i = 1; i < sse.events.size(); ++i) {
    const json& delta = sse.events[i]["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("role"));
    if (delta.contains("content")) text += delta["content"].get<std::string>();
    EXPECT_FALSE(sse.events[i].contains("usage"));  // no include_usage
  }
  EXPECT_EQ(text, "use");  // "user: abc\nassistant:" cycled from its start
  EXPECT_EQ(sse.events.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerTest, ModelsHealthAndLogLines) {
  httplib::Client c = client();
  httplib::Result models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["max_model_len"], 256);
  EXPECT_EQ(c.Get("/v1/models/tiny")->status, 200);
  EXPECT_EQ(c.Get("/v1/models/other")->status, 404);
  httplib::Result health = c.Get("/health");
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");

  const auto [status, r] = post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 2}});
  ASSERT_EQ(status, 200);
  ASSERT_TRUE(eventually([&] { return !log_lines().empty(); }));
  const std::string line = log_lines().back();
  EXPECT_NE(line.find(r["id"].get<std::string>() + " 200 length"), std::string::npos) << line;
  EXPECT_NE(line.find("prompt_tokens=3 completion_tokens=2 ttft="), std::string::npos) << line;
  EXPECT_NE(line.find("client=127.0.0.1:"), std::string::npos) << line;
}

TEST_F(ServerTest, MetricsCountResponsesAndLatencies) {
  post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 4}});
  post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 4}});
  post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 0}});
  httplib::Client c = client();
  c.Get("/v1/models/some-id");
  c.Get("/no/such/path");
  const httplib::Result res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = res->body;
  auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "no line '" << line << "' in\n" << text;
  };
  const std::string m = "{model_name=\"tiny\"";
  has("tessel:http_requests_total" + m + ",endpoint=\"/v1/completions\",code=\"200\"} 2");
  has("tessel:http_requests_total" + m + ",endpoint=\"/v1/completions\",code=\"400\"} 1");
  has("tessel:request_success_total" + m + ",finished_reason=\"length\"} 2");
  has("tessel:http_requests_total" + m + ",endpoint=\"/v1/models/{id}\",code=\"404\"} 1");
  has("tessel:http_requests_total" + m + ",endpoint=\"other\",code=\"404\"} 1");
  has("tessel:time_to_first_token_seconds_count" + m + "} 2");
  has("tessel:time_to_first_token_seconds_bucket" + m + ",le=\"+Inf\"} 2");
  has("tessel:inter_token_latency_seconds_count" + m + "} 6");  // 3 intervals per request
  has("tessel:e2e_request_latency_seconds_count" + m + "} 2");
  has("tessel:kv_cache_blocks_used" + m + "} 7");
  has("tessel:kv_cache_blocks_free" + m + "} 93");
  has("tessel:kv_cache_usage_perc" + m + "} 0.070000000000000007");
  has("tessel:prefix_cache_hit_rate" + m + "} 0.25");
  has("tessel:num_preemptions_total" + m + "} 3");
  has("tessel:generation_tokens_total" + m + "} 8");
  has("# TYPE tessel:time_to_first_token_seconds histogram");
}

}  // namespace
}  // namespace tessel::serve::test
