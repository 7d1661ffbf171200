// SPDX-License-Identifier: Apache-2.0
// The two generation routes (/v1/completions, /v1/chat/completions): body -> checked request ->
// prompt ids -> EngineQueue::submit, then either one JSON response when every choice has finished
// or a stream of server-sent events as the deltas come. The engine's sink only queues (a
// DeltaChannel per request); the connection's own thread writes. A client that goes away is
// noticed between deltas (a failed write, or PeerWatch while nothing is written) and its request
// cancelled at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "tessel/serve/http_server.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace tessel::serve {

class GenerationHandler {
 public:
  GenerationHandler(const ServerOptions& options, ServerMetrics& metrics);

  // The engine requests go to; handle() is called only once there is one (the server answers 503
  // before).
  void attach(EngineQueue& engine) { engine_ = &engine; }
  EngineQueue* engine() const { return engine_; }

  void handle(Endpoint endpoint, const httplib::Request& req, const std::string& body,
              httplib::Response& res);
  bool known_model(const std::string& name) const;
  // The log line of a request refused before it reached a handler (e.g. 413).
  void log_refused(const httplib::Request& req, int status, const std::string& why) const;

 private:
  struct Running;
  std::string new_id(Endpoint endpoint);
  void respond_when_done(Running& run, const httplib::Request& req, httplib::Response& res);
  void stream(std::shared_ptr<Running> run, const httplib::Request& req, httplib::Response& res);
  void log_line(const std::string& line) const;
  void log_finished(const Running& run, int status, const std::string& outcome) const;

  std::atomic<EngineQueue*> engine_{nullptr};
  const ServerOptions& options_;
  ServerMetrics& metrics_;
  std::string id_prefix_;  // random per server, so ids do not repeat across restarts
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace tessel::serve
