// SPDX-License-Identifier: Apache-2.0
// The OpenAI-compatible HTTP front end of `tessel serve` (docs/SERVING.md, "HTTP API"): routes
// (/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics), API-key checks, body
// limits, OpenAI's error objects, streaming by server-sent events, per-request log lines. It talks
// to the engine only through EngineQueue, so it serves any implementation of it. Built on
// cpp-httplib (one thread per connection from a pool; chunked content providers for streams).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/serve/openai_protocol.h"
#include "tessel/serve/request.h"
#include "tessel/serve/server_metrics.h"

namespace tessel::serve {

// The prompt text of a conversation: the model's ChatTemplate::render (serve/chat_template.h),
// called from several HTTP threads at once.
using ChatRenderer = std::function<std::string(const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::bind)
  // The model's id in /v1/models and in responses; requests may also name it by an alias (the
  // model directory's name).
  std::string served_model_name = "model";
  std::vector<std::string> model_aliases;
  std::string api_key;                       // empty: no key; else /v1/* needs "Bearer <key>"
  size_t max_body_bytes = size_t(16) << 20;  // larger bodies: 413
  ProtocolLimits limits;
  int http_threads = 256;  // connections served at once (each stream holds one)
  // How often a waiting request checks for deltas and for a client that went away.
  std::chrono::milliseconds poll_interval{20};
  // An SSE comment is sent when a stream has been silent this long (a long prefill), so that
  // proxies keep the connection.
  std::chrono::milliseconds keep_alive_interval{15000};
  std::chrono::seconds retry_after{1};  // the Retry-After of a 429
  // /health answers 503 when the engine's thread has stopped, or has been inside one step longer
  // than this (hung): liveness for a supervisor, beyond the HTTP thread answering at all.
  std::chrono::milliseconds engine_stall_timeout{60000};
  ChatRenderer render_chat;  // null: /v1/chat/completions answers 500
  // One line per finished generation request; null: tessel's log at info level.
  std::function<void(const std::string&)> log;
};

class HttpServer {
 public:
  // The server may listen before the engine exists (a model loading answers /health with 503):
  // attach() it then, and set_ready(true).
  explicit HttpServer(ServerOptions options);
  HttpServer(EngineQueue& engine, ServerOptions options);
  void attach(EngineQueue& engine);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (a free port when port is 0) and returns the port; Error when it cannot.
  int bind();
  // Serves on a background thread until stop(); bind() first.
  void start();
  // Until ready, /health and the /v1 generation routes answer 503 (the model is loading); ready
  // needs an attached engine. Once ready, /health also answers 503 while the engine is not live
  // (EngineStats::engine_alive, busy_seconds against ServerOptions::engine_stall_timeout).
  void set_ready(bool ready);
  // Draining: /health and new generation requests answer 503; running ones continue.
  void begin_drain();
  // Closes the listener and returns when every connection's thread has finished.
  void stop();

  int port() const;
  ServerMetrics& metrics();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessel::serve
