// SPDX-License-Identifier: Apache-2.0
// A tessel HTTP server on a free loopback port in front of the scripted engine, a cpp-httplib
// client for it, a raw socket for what a well-behaved client would not do (disconnect, lie about
// the body length), and the server-sent events of a stream parsed back into JSON. The server and
// engine are stopped when the test ends.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/tokenizer_test_util.h"
#include "scripted_engine.h"
#include "tessel/serve/http_server.h"

namespace tessel::serve::test {

using nlohmann::json;

// The JSON of each `data:` event of an SSE body, and whether it ended with [DONE].
struct SseEvents {
  std::vector<json> events;
  bool done = false;
  int comments = 0;
};

inline SseEvents parse_sse(const std::string& body) {
  SseEvents out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line: " << body.substr(pos);
    if (end == std::string::npos) break;
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind(":", 0) == 0) {
      ++out.comments;
      continue;
    }
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    EXPECT_FALSE(out.done) << "an event after [DONE]";
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      out.done = true;
    } else {
      out.events.push_back(json::parse(data));
    }
  }
  return out;
}

// Waits up to `limit` for `condition` (a liveness bound, not a timing assertion).
inline bool eventually(const std::function<bool()>& condition,
                       std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// A plain TCP connection to the server.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~RawConnection() { close(); }
  void send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may close early (e.g. 413)
      sent += size_t(n);
    }
  }
  // Reads until `needle` appears, the peer closes, or `limit` passes; returns what came.
  std::string read_until(const std::string& needle,
                         std::chrono::seconds limit = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (received_.find(needle) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      received_.append(buf, size_t(n));
    }
    return received_;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string received_;
};

inline std::string post_request(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

class ServerTest : public ::testing::Test {
 protected:
  // Starts the engine and the server; tests that need other options call it again first.
  void start(ScriptedEngine::Options engine_options = {}, ServerOptions options = {}) {
    server_.reset();
    engine_.reset();
    engine_ = std::make_unique<ScriptedEngine>(io::Tokenizer(io::small_config()), engine_options);
    options.port = 0;
    options.served_model_name = "tiny";
    options.model_aliases = {"tiny-dir"};
    options.limits.max_n = 4;
    options.poll_interval = std::chrono::milliseconds(5);
    if (!options.render_chat) {
      options.render_chat = [](const std::vector<ChatMessage>& turns, bool generation_prompt) {
        std::string text;
        for (const ChatMessage& t : turns) text += t.role + ": " + t.content + "\n";
        return generation_prompt ? text + "assistant:" : text;
      };
    }
    options.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mutex_);
      log_.push_back(line);
    };
    server_ = std::make_unique<HttpServer>(*engine_, options);
    port_ = server_->bind();
    server_->start();
    server_->set_ready(true);
  }
  void SetUp() override { start(); }
  void TearDown() override {
    server_.reset();  // stops the listener and joins its threads
    engine_.reset();
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }
  // POSTs `body` and returns (status, parsed body).
  std::pair<int, json> post(const std::string& path, const json& body) const {
    return post_text(path, body.dump());
  }
  std::pair<int, json> post_text(const std::string& path, const std::string& body) const {
    httplib::Client c = client();
    const httplib::Result r = c.Post(path.c_str(), body, "application/json");
    EXPECT_TRUE(r) << "no response from " << path;
    if (!r) return {0, json()};
    return {r->status, r->body.empty() ? json() : json::parse(r->body, nullptr, false)};
  }
  std::vector<std::string> log_lines() {
    std::lock_guard<std::mutex> lock(log_mutex_);
    return log_;
  }
  // The text the scripted engine generates for choice `index` of `prompt` (as ids).
  std::string expected_text(const std::vector<int64_t>& prompt, int64_t tokens, size_t index = 0) {
    std::vector<int32_t> ids;
    for (int64_t k = 0; k < tokens; ++k)
      ids.push_back(int32_t(prompt[(size_t(k) + index) % prompt.size()]));
    return engine_->tokenizer().decode(ids);
  }
  std::vector<int64_t> encode(const std::string& text) const {
    std::vector<int64_t> ids;
    for (int32_t id : engine_->tokenizer().encode(text, true)) ids.push_back(id);
    return ids;
  }

  std::unique_ptr<ScriptedEngine> engine_;
  std::unique_ptr<HttpServer> server_;
  int port_ = -1;
  std::mutex log_mutex_;
  std::vector<std::string> log_;
};

// The error object of a refused request: status, type and code.
inline void expect_error(const std::pair<int, json>& response, int status, const std::string& type,
                         const std::string& code = "") {
  EXPECT_EQ(response.first, status) << response.second.dump();
  const json& e = response.second["error"];
  ASSERT_TRUE(e.is_object()) << response.second.dump();
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_EQ(e["type"], type);
  EXPECT_TRUE(e.contains("param"));
  if (code.empty()) {
    EXPECT_TRUE(e["code"].is_null()) << e.dump();
  } else {
    EXPECT_EQ(e["code"], code);
  }
}

}  // namespace tessel::serve::test
