// SPDX-License-Identifier: Apache-2.0
// /health follows the engine, not only the HTTP thread: the real Engine on a tiny GPT-2 behind
// the real HttpServer answers 503 before its thread runs, 503 while one step has been running for
// longer than the stall limit (a forward pre-hook on the final LayerNorm holds the step), 200 again
// once the step ends, and 503 after the thread stopped; /metrics carries the same two signals.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/tokenizer_test_util.h"
#include "server_fixture.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/serve/engine.h"
#include "tessel/serve/http_server.h"

namespace tessel::serve {
namespace {

using nlohmann::json;
using test::eventually;

std::shared_ptr<models::GPT2> tiny_gpt2() {
  models::GPT2Config c;
  c.vocab_size = 263;  // the test tokenizer's 262 ids and one padded row
  c.n_positions = 33;
  c.n_embd = 12;
  c.n_head = 3;
  c.n_layer = 1;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  Generator g(7);
  return models::GPT2::random(c, g);
}

// Holds every forward of a module while closed (the engine thread blocks inside its step).
class Gate {
 public:
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.wait(lock, [&] { return open_; });
  }
  bool entered() {
    std::lock_guard<std::mutex> lock(mu_);
    return entered_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true, entered_ = false;
};

// The /health answer: status and, for a 503, the error message.
std::pair<int, std::string> health(httplib::Client& c) {
  httplib::Result r = c.Get("/health");
  if (!r) return {0, ""};
  if (r->status == 200) return {200, ""};
  return {r->status, json::parse(r->body)["error"]["message"].get<std::string>()};
}

double metric(httplib::Client& c, const std::string& name) {
  const std::string body = c.Get("/metrics")->body;
  const size_t at = body.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  return std::stod(body.substr(body.find("} ", at) + 2));
}

TEST(EngineHealth, HealthFollowsTheEngineThread) {
  auto model = tiny_gpt2();
  Gate gate;
  model->ln_f->register_forward_pre_hook(
      [&](nn::Module&, const std::vector<Tensor>&) { gate.pass(); });
  Engine engine(model, io::Tokenizer(io::small_config()), {});
  ServerOptions options;
  options.port = 0;
  options.engine_stall_timeout = std::chrono::milliseconds(200);
  options.log = [](const std::string&) {};
  HttpServer server(engine, options);
  const int port = server.bind();
  server.start();
  server.set_ready(true);
  httplib::Client c("127.0.0.1", port);

  // Attached and ready, but the engine's thread does not run yet.
  EXPECT_EQ(health(c), std::make_pair(503, std::string("the engine is not running")));
  EXPECT_EQ(metric(c, "tessel:engine_alive"), 0.0);
  engine.start();
  EXPECT_TRUE(eventually([&] { return health(c).first == 200; }));
  EXPECT_EQ(metric(c, "tessel:engine_alive"), 1.0);

  // A step that does not end.
  gate.close();
  std::atomic<bool> finished{false};
  Request r;
  r.id = "held";
  r.prompt = {5, 9, 13};
  r.params.max_tokens = 3;
  r.params.ignore_eos = true;
  ASSERT_EQ(engine
                .submit(r,
                        [&](const Delta& d) {
                          if (d.finish != FinishReason::kNone) finished = true;
                        })
                .status,
            SubmitStatus::kAccepted);
  ASSERT_TRUE(eventually([&] { return gate.entered(); }));
  EXPECT_TRUE(eventually([&] { return health(c).first == 503; }));
  const auto [status, message] = health(c);
  EXPECT_EQ(status, 503);
  EXPECT_NE(message.find("inside one step"), std::string::npos) << message;
  EXPECT_GT(metric(c, "tessel:engine_busy_seconds"), 0.2);
  EXPECT_TRUE(engine.stats().engine_alive);

  // The step ends: healthy again, and idle once the request is done.
  gate.open();
  EXPECT_TRUE(eventually([&] { return finished.load(); }));
  EXPECT_TRUE(eventually([&] { return health(c).first == 200; }));
  EXPECT_TRUE(eventually([&] { return engine.stats().busy_seconds == 0; }));

  // The thread stops (a drain that the HTTP side was not told about): unhealthy.
  engine.drain(std::chrono::seconds(10));
  EXPECT_FALSE(engine.stats().engine_alive);
  EXPECT_EQ(health(c), std::make_pair(503, std::string("the engine is not running")));
  EXPECT_EQ(metric(c, "tessel:engine_alive"), 0.0);
  server.stop();
}

}  // namespace
}  // namespace tessel::serve
