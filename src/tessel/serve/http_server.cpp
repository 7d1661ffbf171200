// SPDX-License-Identifier: Apache-2.0
// HttpServer: cpp-httplib routes, authentication, limits and the small endpoints; the generation
// routes are in generation_handler.cpp.
#include "tessel/serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <ctime>
#include <thread>

#include "tessel/core/error.h"
#include "tessel/core/log.h"
#include "tessel/serve/generation_handler.h"
#include "tessel/serve/openai_response.h"

namespace tessel::serve {

using nlohmann::json;

namespace {

// cpp-httplib 0.11 listens with a backlog of 5: a burst of clients beyond that waits for TCP's
// retransmission (a second or more) or fails. Listening again on the bound socket raises the
// backlog (Linux takes a second listen() as a new backlog); the socket is a protected member.
class Listener : public httplib::Server {
 public:
  void raise_backlog() {
    const socket_t sock = svr_sock_;
    if (sock != INVALID_SOCKET) ::listen(sock, SOMAXCONN);
  }
};

}  // namespace

struct HttpServer::Impl {
  explicit Impl(ServerOptions opts)
      : options(std::move(opts)),
        metrics(options.served_model_name),
        generation(options, metrics) {}

  ServerOptions options;
  ServerMetrics metrics;
  GenerationHandler generation;
  Listener server;
  std::thread thread;
  int port = -1;
  int64_t created = std::time(nullptr);
  std::atomic<bool> ready{false}, draining{false}, listening_ended{false};

  void routes();
  EngineQueue* engine() const { return generation.engine(); }
  bool authorized(const httplib::Request& req) const;
  static void send_error(httplib::Response& res, const ApiError& error);
};

namespace {

// The endpoint label of a response: the route, never a client-chosen path (that would let clients
// create any number of series).
std::string endpoint_label(const std::string& path) {
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  for (const char* route :
       {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"})
    if (path == route) return route;
  return "other";
}

// Compares without an early exit, so the time taken does not tell how much of a key was right.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ b[i]);
  return diff == 0;
}

// Why the engine is not live (empty when it is): its thread stopped, or it has been inside one
// step for longer than `stall`.
std::string engine_unhealthy(const EngineStats& s, std::chrono::milliseconds stall) {
  if (!s.engine_alive)
    return s.engine_error.empty() ? "the engine is not running"
                                  : "the engine stopped after an error: " + s.engine_error;
  if (s.busy_seconds * 1e3 > double(stall.count()))
    return "the engine has been inside one step for " + std::to_string(int64_t(s.busy_seconds)) +
           " s (the limit is " + std::to_string(stall.count()) + " ms)";
  return "";
}

ApiError too_large(size_t limit) {
  return ApiError(
      413,
      "The request body is larger than the server's limit of " + std::to_string(limit) + " bytes",
      "invalid_request_error", "", "request_too_large");
}

}  // namespace

void HttpServer::Impl::send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status();
  res.set_content(dump_json(error_json(error)), "application/json");
}

bool HttpServer::Impl::authorized(const httplib::Request& req) const {
  if (options.api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  return header.rfind(prefix, 0) == 0 && same_secret(header.substr(prefix.size()), options.api_key);
}

void HttpServer::Impl::routes() {
  server.new_task_queue = [n = options.http_threads] { return new httplib::ThreadPool(size_t(n)); };
  server.set_payload_max_length(options.max_body_bytes);
  server.set_keep_alive_timeout(5);
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // A body announced larger than the limit is refused before it is read (cpp-httplib's own
    // limit would first read and discard all of it); the connection is closed after the answer.
    if (req.has_header("Content-Length")) {
      const std::string length = req.get_header_value("Content-Length");
      const bool digits =
          !length.empty() && length.find_first_not_of("0123456789") == std::string::npos;
      if (!digits) {
        res.set_header("Connection", "close");
        send_error(res, invalid_request("Content-Length '" + length + "' is not a byte count"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (length.size() > 18 || std::stoull(length) > options.max_body_bytes) {
        res.set_header("Connection", "close");
        send_error(res, too_large(options.max_body_bytes));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // Health and metrics stay open to probes and scrapers; the API needs the key.
    if (req.path.rfind("/v1/", 0) == 0 && !authorized(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, ApiError(401,
                               "Incorrect or missing API key: send the header 'Authorization: "
                               "Bearer <key>' with the server's --api-key",
                               "invalid_request_error", "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    // Every API route answers 503 until the engine runs and once draining starts, as /health
    // does: a client that lists the models before the first completion must not read "ready".
    const bool generation = req.method == "POST" &&
                            (req.path == "/v1/completions" || req.path == "/v1/chat/completions");
    const bool models =
        req.method == "GET" && (req.path == "/v1/models" || req.path.rfind("/v1/models/", 0) == 0);
    if ((generation || models) && (!ready || draining)) {
      send_error(res,
                 ApiError(503, draining ? "the server is shutting down" : "the model is loading",
                          "server_error", "", "service_unavailable"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // The generation routes read their bodies themselves: cpp-httplib 0.11 applies its payload
  // limit to bodies with a Content-Length only, and would buffer a chunked body of any size.
  auto generation_route = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader& read) {
      std::string body;
      bool over = false;
      read([&](const char* data, size_t n) {
        over = body.size() + n > options.max_body_bytes;
        if (!over) body.append(data, n);
        return !over;
      });
      if (over) {
        res.set_header("Connection", "close");
        send_error(res, too_large(options.max_body_bytes));
        return;
      }
      generation.handle(endpoint, req, body, res);
    };
  };
  server.Post("/v1/completions", generation_route(Endpoint::kCompletions));
  server.Post("/v1/chat/completions", generation_route(Endpoint::kChat));
  auto model_object = [this] {
    return json{{"id", options.served_model_name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "tessel"},
                {"root", options.served_model_name},
                {"max_model_len", engine() ? engine()->context_length() : 0}};
  };
  server.Get("/v1/models", [model_object](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json({{"object", "list"}, {"data", json::array({model_object()})}}),
                    "application/json");
  });
  server.Get(
      "/v1/models/(.+)", [this, model_object](const httplib::Request& req, httplib::Response& res) {
        if (!generation.known_model(req.matches[1])) {
          send_error(res,
                     ApiError(404, "The model '" + std::string(req.matches[1]) + "' does not exist",
                              "invalid_request_error", "model", "model_not_found"));
          return;
        }
        res.set_content(dump_json(model_object()), "application/json");
      });
  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!ready || draining) {
      send_error(res,
                 ApiError(503, draining ? "the server is shutting down" : "the model is loading",
                          "server_error", "", "service_unavailable"));
      return;
    }
    if (const std::string dead = engine_unhealthy(engine()->stats(), options.engine_stall_timeout);
        !dead.empty()) {
      send_error(res, ApiError(503, dead, "server_error", "", "service_unavailable"));
      return;
    }
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(engine() ? engine()->stats() : EngineStats{}),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  // Statuses cpp-httplib answers itself (no route, body too large, unparsable request) get
  // OpenAI's error object too.
  server.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      send_error(res, ApiError(404, "Not found: " + req.method + " " + req.path,
                               "invalid_request_error", "", "unknown_url"));
    } else if (res.status == 413) {
      send_error(res, too_large(options.max_body_bytes));
    } else {
      send_error(res, ApiError(res.status, "Bad request", "invalid_request_error"));
    }
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, what, "server_error"));
      });
  // Counted just before the response is written (cpp-httplib calls this for every response,
  // routed or not), so a client that has its answer finds it counted in /metrics.
  server.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    metrics.count_response(endpoint_label(req.path), res.status);
    if (res.status == 413) generation.log_refused(req, 413, "body too large");
  });
}

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->routes();
}

HttpServer::HttpServer(EngineQueue& engine, ServerOptions options)
    : HttpServer(std::move(options)) {
  attach(engine);
}

void HttpServer::attach(EngineQueue& engine) {
  impl_->generation.attach(engine);
}

HttpServer::~HttpServer() {
  stop();
}

int HttpServer::bind() {
  const ServerOptions& o = impl_->options;
  if (o.port == 0) {
    impl_->port = impl_->server.bind_to_any_port(o.host);
  } else {
    impl_->port = impl_->server.bind_to_port(o.host, o.port) ? o.port : -1;
  }
  TESSEL_CHECK(impl_->port > 0, "serve: cannot listen on ", o.host, ":", o.port,
               " (address in use, or not an address of this machine)");
  impl_->server.raise_backlog();
  return impl_->port;
}

void HttpServer::start() {
  TESSEL_CHECK(impl_->port > 0, "HttpServer::start: bind() first");
  impl_->listening_ended = false;
  impl_->thread = std::thread([this] {
    impl_->server.listen_after_bind();
    impl_->listening_ended = true;
  });
  // cpp-httplib's stop() does nothing until the listening loop runs: wait for it, so that a stop()
  // right after start() is not lost.
  while (!impl_->server.is_running() && !impl_->listening_ended)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpServer::set_ready(bool ready) {
  TESSEL_CHECK(!ready || impl_->engine(), "HttpServer::set_ready: attach() an engine first");
  impl_->ready = ready;
}

void HttpServer::begin_drain() {
  impl_->draining = true;
}

void HttpServer::stop() {
  impl_->draining = true;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int HttpServer::port() const {
  return impl_->port;
}

ServerMetrics& HttpServer::metrics() {
  return impl_->metrics;
}

}  // namespace tessel::serve
