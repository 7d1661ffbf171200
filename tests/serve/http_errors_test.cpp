// SPDX-License-Identifier: Apache-2.0
// Bad input and hard conditions over loopback, each answered with the right status and OpenAI's
// error object, the server staying up: malformed bodies, unknown models and routes, context
// overflow, body limits (a claimed 100 MB body), API keys, a full queue (429 with Retry-After),
// loading and draining (503), and clients that disconnect while streaming or waiting (their
// requests cancelled).
#include <gtest/gtest.h>

#include "server_fixture.h"

namespace tessel::serve::test {
namespace {

TEST_F(ServerTest, BadRequestsAreAnsweredAndTheServerStaysUp) {
  expect_error(post_text("/v1/completions", "{\"prompt\": "), 400, "invalid_request_error");
  expect_error(post_text("/v1/completions", "{\"prompt\": \"\xfe\"}"), 400,
               "invalid_request_error");
  expect_error(post("/v1/completions", {{"prompt", "a"}, {"temperature", "x"}}), 400,
               "invalid_request_error");
  expect_error(post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 0}}), 400,
               "invalid_request_error");
  expect_error(post("/v1/completions", {{"prompt", "a"}, {"n", 9}}), 400, "invalid_request_error");
  expect_error(post("/v1/chat/completions", {{"messages", json::array()}}), 400,
               "invalid_request_error");
  expect_error(post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1000}}), 400,
               "invalid_request_error", "context_length_exceeded");
  expect_error(post("/v1/completions", {{"prompt", std::string(300, 'x')}}), 400,
               "invalid_request_error", "context_length_exceeded");
  const auto unknown = post("/v1/completions", {{"model", "gpt-9"}, {"prompt", "a"}});
  expect_error(unknown, 404, "invalid_request_error", "model_not_found");
  EXPECT_EQ(unknown.second["error"]["param"], "model");
  expect_error(post("/v1/nothing", json::object()), 404, "invalid_request_error", "unknown_url");
  httplib::Client c = client();
  const httplib::Result get = c.Get("/v1/completions");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 404);
  // Still serving.
  EXPECT_EQ(post("/v1/completions", {{"prompt", "ok"}, {"max_tokens", 1}}).first, 200);
  EXPECT_EQ(engine_->submitted().size(), 1u);  // none of the bad ones reached the engine
}

TEST_F(ServerTest, BodiesOverTheLimitAre413) {
  ServerOptions options;
  options.max_body_bytes = 4096;
  start({}, options);
  expect_error(post_text("/v1/completions", "{\"prompt\": \"" + std::string(5000, 'a') + "\"}"),
               413, "invalid_request_error", "request_too_large");
  // A client that announces 100 MB: refused after the headers, the body never buffered.
  RawConnection raw(port_);
  raw.send(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 100000000\r\n\r\n{\"prompt\": \"");
  const std::string reply = raw.read_until("\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply;
  raw.close();
  RawConnection garbled(port_);
  garbled.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n");
  const std::string garbled_reply = garbled.read_until("\r\n\r\n");
  EXPECT_EQ(garbled_reply.rfind("HTTP/1.1 400", 0), 0u) << garbled_reply;
  // A chunked body has no length to check first: it is cut once it passes the limit.
  RawConnection chunked(port_);
  const std::string piece = std::string(1000, ' ');
  std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 8; ++i) request += "3e8\r\n" + piece + "\r\n";
  chunked.send(request + "0\r\n\r\n");
  const std::string chunked_reply = chunked.read_until("\r\n\r\n");
  EXPECT_EQ(chunked_reply.rfind("HTTP/1.1 413", 0), 0u) << chunked_reply;
  EXPECT_EQ(post("/v1/completions", {{"prompt", "ok"}, {"max_tokens", 1}}).first, 200);
}

TEST_F(ServerTest, ApiKeyGuardsTheApiButNotHealth) {
  ServerOptions options;
  options.api_key = "sesame";
  start({}, options);
  httplib::Client c = client();
  const std::string body = json{{"prompt", "a"}, {"max_tokens", 1}}.dump();
  httplib::Result none = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["code"], "invalid_api_key");
  c.set_bearer_token_auth("wrong");
  EXPECT_EQ(c.Post("/v1/completions", body, "application/json")->status, 401);
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  c.set_bearer_token_auth("sesame");
  EXPECT_EQ(c.Post("/v1/completions", body, "application/json")->status, 200);
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
  httplib::Client anonymous = client();
  EXPECT_EQ(anonymous.Get("/health")->status, 200);
  EXPECT_EQ(anonymous.Get("/metrics")->status, 200);
}

TEST_F(ServerTest, AFullQueueAnswers429WithRetryAfter) {
  constexpr int kQueue = 64;
  ScriptedEngine::Options engine_options;
  engine_options.max_queue = kQueue;
  start(engine_options);
  engine_->pause(true);
  constexpr int kClients = 500;
  std::vector<int> status(kClients, 0);
  std::atomic<int> refused{0};
  std::vector<std::string> retry(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client c = client();
      const httplib::Result r = c.Post(
          "/v1/completions", json{{"prompt", "abc"}, {"max_tokens", 2}}.dump(), "application/json");
      if (!r) return;
      status[size_t(i)] = r->status;
      retry[size_t(i)] = r->get_header_value("Retry-After");
      if (r->status == 429) {
        EXPECT_EQ(json::parse(r->body)["error"]["code"], "queue_full");
        ++refused;
      }
    });
  }
  // The refused ones return at once; the accepted ones wait for the engine.
  const bool all_answered = eventually([&] { return refused == kClients - kQueue; });
  EXPECT_TRUE(all_answered);
  EXPECT_EQ(engine_->submitted().size(), size_t(kQueue));
  engine_->pause(false);
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(std::count(status.begin(), status.end(), 200), kQueue);
  EXPECT_EQ(std::count(status.begin(), status.end(), 429), kClients - kQueue);
  for (int i = 0; i < kClients; ++i)
    if (status[size_t(i)] == 429) {
      EXPECT_EQ(retry[size_t(i)], "1");
    }
}

TEST_F(ServerTest, LoadingAndDrainingAnswer503) {
  server_->set_ready(false);
  expect_error(post("/v1/completions", {{"prompt", "a"}}), 503, "server_error",
               "service_unavailable");
  httplib::Client c = client();
  EXPECT_EQ(c.Get("/health")->status, 503);
  for (const char* path : {"/v1/models", "/v1/models/tiny"}) {
    httplib::Result r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 503) << path << ": " << r->body;
    const json error = json::parse(r->body).at("error");
    EXPECT_EQ(error.at("type"), "server_error") << path;
    EXPECT_EQ(error.at("code"), "service_unavailable") << path;
    EXPECT_EQ(error.at("message"), "the model is loading") << path;
  }
  server_->set_ready(true);
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
  EXPECT_EQ(c.Get("/v1/models/tiny")->status, 200);
  server_->begin_drain();
  EXPECT_EQ(c.Get("/health")->status, 503);
  EXPECT_EQ(c.Get("/v1/models")->status, 503);
  expect_error(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}}}),
               503, "server_error", "service_unavailable");
  EXPECT_EQ(c.Get("/metrics")->status, 200);  // still observable while draining
}

TEST_F(ServerTest, DrainingLetsRunningStreamsFinish) {
  ScriptedEngine::Options engine_options;
  engine_options.step = std::chrono::milliseconds(2);
  start(engine_options);
  RawConnection raw(port_);
  raw.send(post_request("/v1/completions",
                        json{{"prompt", "abc"}, {"max_tokens", 100}, {"stream", true}}.dump()));
  raw.read_until("data: ");
  server_->begin_drain();
  engine_->drain();
  expect_error(post("/v1/completions", {{"prompt", "a"}}), 503, "server_error",
               "service_unavailable");
  const std::string body = raw.read_until("data: [DONE]");
  EXPECT_NE(body.find("\"finish_reason\":\"length\""), std::string::npos) << body;
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
  EXPECT_TRUE(engine_->cancelled().empty());
}

TEST(HttpServerAlone, AnswersWhileTheModelLoads) {
  ServerOptions options;
  options.port = 0;
  options.log = [](const std::string&) {};
  HttpServer server(options);
  const int port = server.bind();
  server.start();
  httplib::Client c("127.0.0.1", port);
  EXPECT_EQ(c.Get("/health")->status, 503);
  EXPECT_EQ(c.Post("/v1/completions", "{}", "application/json")->status, 503);
  EXPECT_EQ(c.Get("/v1/models")->status, 503);  // no engine to describe yet
  EXPECT_EQ(c.Get("/metrics")->status, 200);
  EXPECT_THROW(server.set_ready(true), Error);  // no engine yet
  ScriptedEngine engine(io::Tokenizer(io::small_config()), {});
  server.attach(engine);
  server.set_ready(true);
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
  EXPECT_EQ(
      c.Post("/v1/completions", R"({"prompt": "ab", "max_tokens": 2})", "application/json")->status,
      200);
  server.stop();  // before the engine it serves goes away
}

TEST_F(ServerTest, AStreamingClientThatDisconnectsIsCancelled) {
  ScriptedEngine::Options engine_options;
  engine_options.context_length = 1 << 20;
  engine_options.step = std::chrono::milliseconds(2);
  start(engine_options);
  RawConnection raw(port_);
  raw.send(post_request("/v1/completions",
                        json{{"prompt", "abc"}, {"max_tokens", 500000}, {"stream", true}}.dump()));
  const std::string head = raw.read_until("data: ");
  ASSERT_NE(head.find("text/event-stream"), std::string::npos) << head;
  raw.close();
  // Cancelled long before its 500000 tokens (which would take over 15 minutes).
  ASSERT_TRUE(eventually([&] { return engine_->cancelled().size() == 1; }));
  EXPECT_EQ(engine_->cancelled()[0], engine_->submitted()[0].id);
  EXPECT_TRUE(eventually([&] { return engine_->live() == 0; }));
  ASSERT_TRUE(eventually([&] {
    const auto lines = log_lines();
    return !lines.empty() && lines.back().find(" 499 cancelled") != std::string::npos;
  }));
}

TEST_F(ServerTest, AWaitingClientThatDisconnectsIsCancelled) {
  engine_->pause(true);
  for (const bool stream : {false, true}) {
    const size_t before = engine_->submitted().size();
    RawConnection raw(port_);
    raw.send(post_request("/v1/completions",
                          json{{"prompt", "abc"}, {"max_tokens", 8}, {"stream", stream}}.dump()));
    ASSERT_TRUE(eventually([&] { return engine_->submitted().size() == before + 1; }));
    raw.close();  // nothing was written to it: the server must notice the close by itself
    ASSERT_TRUE(eventually([&] { return engine_->cancelled().size() == before + 1; }))
        << "stream=" << stream;
  }
  EXPECT_EQ(engine_->live(), 0u);
}

}  // namespace
}  // namespace tessel::serve::test
