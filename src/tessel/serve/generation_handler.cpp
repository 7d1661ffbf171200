// SPDX-License-Identifier: Apache-2.0
// The completion routes: parse, tokenize, submit, then answer whole or as a server-sent stream.
#include "tessel/serve/generation_handler.h"

#include <httplib.h>

#include <cstdio>
#include <ctime>
#include <random>

#include "tessel/core/error.h"
#include "tessel/core/log.h"
#include "tessel/io/tokenizer.h"
#include "tessel/serve/delta_channel.h"
#include "tessel/serve/openai_response.h"
#include "tessel/serve/peer_watch.h"

namespace tessel::serve {

using Clock = DeltaChannel::Clock;

// One accepted request while it is answered.
struct GenerationHandler::Running {
  std::string id;
  ResponseHead head;
  ParsedRequest parsed;
  int64_t prompt_tokens = 0;
  std::string echo_text, client, engine_error;
  Clock::time_point arrival;
  std::shared_ptr<DeltaChannel> channel;
  std::vector<ChoiceOutput> choices;
  // Streams only.
  std::unique_ptr<StreamEncoder> encoder;
  std::unique_ptr<PeerWatch> watch;
  Clock::time_point last_write;
  int status = 200;        // what the log line says
  bool completed = false;  // the stream was written to its end

  void add(const Delta& d) {
    if (d.index < 0 || size_t(d.index) >= choices.size()) return;
    ChoiceOutput& c = choices[size_t(d.index)];
    c.text += d.text;
    c.tokens.insert(c.tokens.end(), d.tokens.begin(), d.tokens.end());
    c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    if (d.finish != FinishReason::kNone) c.finish = d.finish;
    if (d.finish == FinishReason::kError && engine_error.empty())
      engine_error = d.error.empty() ? "the engine failed to run the request" : d.error;
  }
  bool any(FinishReason reason) const {
    for (const ChoiceOutput& c : choices)
      if (c.finish == reason) return true;
    return false;
  }
  Usage usage() const {
    Usage u{prompt_tokens, 0};
    for (const ChoiceOutput& c : choices) u.completion_tokens += int64_t(c.tokens.size());
    return u;
  }
};

namespace {

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status();
  res.set_content(dump_json(error_json(error)), "application/json");
}

std::string client_of(const httplib::Request& req) {
  return req.remote_addr + ":" + std::to_string(req.remote_port);
}

const ApiError kDrainCancelled(503, "the server shut down before the request finished",
                               "server_error", "", "service_unavailable");

}  // namespace

GenerationHandler::GenerationHandler(const ServerOptions& options, ServerMetrics& metrics)
    : options_(options), metrics_(metrics) {
  std::random_device device;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", device(), device());
  id_prefix_ = buf;
}

std::string GenerationHandler::new_id(Endpoint endpoint) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%08llx", static_cast<unsigned long long>(next_id_++));
  return (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + id_prefix_ + buf;
}

bool GenerationHandler::known_model(const std::string& name) const {
  if (name == options_.served_model_name) return true;
  for (const std::string& alias : options_.model_aliases)
    if (name == alias) return true;
  return false;
}

void GenerationHandler::log_line(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    log(LogLevel::Info, "serve: ", line);
  }
}

void GenerationHandler::log_refused(const httplib::Request& req, int status,
                                    const std::string& why) const {
  log_line("- " + std::to_string(status) + " " + req.method + " " + req.path + " (" + why +
           ") client=" + client_of(req));
}

void GenerationHandler::log_finished(const Running& run, int status,
                                     const std::string& outcome) const {
  const Usage u = run.usage();
  const double total = std::chrono::duration<double>(Clock::now() - run.arrival).count();
  const std::optional<double> ttft = run.channel->time_to_first_token();
  char times[96];
  if (ttft) {
    std::snprintf(times, sizeof(times), "ttft=%.3fs total=%.3fs", *ttft, total);
  } else {
    std::snprintf(times, sizeof(times), "ttft=- total=%.3fs", total);
  }
  log_line(run.id + " " + std::to_string(status) + " " + outcome +
           " prompt_tokens=" + std::to_string(u.prompt_tokens) + " completion_tokens=" +
           std::to_string(u.completion_tokens) + " " + times + " client=" + run.client);
}

void GenerationHandler::handle(Endpoint endpoint, const httplib::Request& req,
                               const std::string& body, httplib::Response& res) {
  auto run = std::make_shared<Running>();
  run->arrival = Clock::now();
  run->client = client_of(req);
  try {
    run->parsed = parse_request(endpoint, body, options_.limits);
    const ParsedRequest& parsed = run->parsed;
    if (!parsed.model.empty() && !known_model(parsed.model))
      throw ApiError(404,
                     "The model '" + parsed.model + "' does not exist (this server serves '" +
                         options_.served_model_name + "')",
                     "invalid_request_error", "model", "model_not_found");
    std::string chat_text;
    if (endpoint == Endpoint::kChat) {
      if (!options_.render_chat)
        throw ApiError(500, "this server has no chat template", "server_error");
      try {
        chat_text = options_.render_chat(parsed.messages, parsed.add_generation_prompt);
      } catch (const Error& e) {
        throw invalid_request(std::string("messages: ") + e.what(), "messages");
      }
    }
    const io::Tokenizer& tokenizer = engine_.load()->tokenizer();
    PreparedPrompt prompt =
        prepare_prompt(parsed, chat_text, tokenizer, engine_.load()->context_length());
    run->prompt_tokens = int64_t(prompt.ids.size());
    if (parsed.echo) {
      std::vector<int32_t> ids(prompt.ids.begin(), prompt.ids.end());
      run->echo_text = parsed.prompt_text ? *parsed.prompt_text : tokenizer.decode(ids);
    }
    run->id = new_id(endpoint);
    run->head = {run->id, endpoint, int64_t(std::time(nullptr)), options_.served_model_name};
    run->choices.resize(size_t(prompt.params.n));
    run->channel = std::make_shared<DeltaChannel>(prompt.params.n, run->arrival, &metrics_);
    const SubmitResult submitted =
        engine_.load()->submit(Request{run->id, std::move(prompt.ids), prompt.params},
                               [channel = run->channel](const Delta& d) { channel->push(d); });
    switch (submitted.status) {
      case SubmitStatus::kAccepted:
        break;
      case SubmitStatus::kQueueFull:
        res.set_header("Retry-After", std::to_string(options_.retry_after.count()));
        throw ApiError(
            429, "The server's request queue is full; retry later (" + submitted.message + ")",
            "rate_limit_error", "", "queue_full");
      case SubmitStatus::kDraining:
        throw ApiError(503, "the server is shutting down", "server_error", "",
                       "service_unavailable");
      case SubmitStatus::kInvalid:
        throw invalid_request(submitted.message);
    }
  } catch (const ApiError& e) {
    send_error(res, e);
    log_line((run->id.empty() ? "-" : run->id) + " " + std::to_string(e.status()) + " " + req.path +
             " (" + e.what() + ") client=" + run->client);
    return;
  }
  if (run->parsed.stream) {
    stream(run, req, res);
  } else {
    respond_when_done(*run, req, res);
  }
}

void GenerationHandler::respond_when_done(Running& run, const httplib::Request& req,
                                          httplib::Response& res) {
  const PeerWatch watch(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  while (!run.channel->finished()) {
    for (const Delta& d : run.channel->pop(options_.poll_interval)) run.add(d);
    if (!run.channel->finished() && watch.closed()) {
      engine_.load()->cancel(run.id);
      res.status = 499;  // nginx's "client closed request": only the log and metrics see it
      log_finished(run, 499, "cancelled (client went away)");
      return;
    }
  }
  if (run.any(FinishReason::kError)) {
    send_error(res, ApiError(500, run.engine_error, "server_error"));
    log_finished(run, 500, "error: " + run.engine_error);
    return;
  }
  if (run.any(FinishReason::kCancelled)) {
    send_error(res, kDrainCancelled);
    log_finished(run, 503, "cancelled (shutting down)");
    return;
  }
  if (const std::optional<double> latency = run.channel->latency())
    metrics_.observe_request_latency(*latency);
  const io::Tokenizer& tokenizer = engine_.load()->tokenizer();
  const TokenBytes bytes = [&tokenizer](int64_t id) {
    const int32_t one = int32_t(id);
    return tokenizer.decode_bytes({&one, 1});
  };
  res.set_content(dump_json(full_response(run.head, run.choices, run.usage(), run.parsed.logprobs,
                                          bytes, run.echo_text)),
                  "application/json");
  log_finished(run, 200, std::string(finish_reason_name(run.choices.front().finish)));
}

void GenerationHandler::stream(std::shared_ptr<Running> run, const httplib::Request& req,
                               httplib::Response& res) {
  const io::Tokenizer& tokenizer = engine_.load()->tokenizer();
  TokenBytes bytes = [&tokenizer](int64_t id) {
    const int32_t one = int32_t(id);
    return tokenizer.decode_bytes({&one, 1});
  };
  run->encoder =
      std::make_unique<StreamEncoder>(run->head, int64_t(run->choices.size()), run->parsed.logprobs,
                                      run->parsed.include_usage, run->echo_text, std::move(bytes));
  run->watch =
      std::make_unique<PeerWatch>(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  run->last_write = Clock::now();
  metrics_.stream_opened();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies: pass each event on at once
  auto pump = [this, run](size_t, httplib::DataSink& sink) {
    std::string out;
    for (const Delta& d : run->channel->pop(options_.poll_interval)) {
      run->add(d);
      out += run->encoder->encode(d);
    }
    const bool failed = run->any(FinishReason::kError);
    const bool finished = failed || run->channel->finished();
    if (failed) {
      engine_.load()->cancel(run->id);  // the other choices of a failed request are not wanted
      out += StreamEncoder::error(ApiError(500, run->engine_error, "server_error"));
      run->status = 500;
    } else if (finished && run->any(FinishReason::kCancelled)) {
      out += StreamEncoder::error(kDrainCancelled);
      run->status = 503;
    } else if (finished) {
      out += run->encoder->finish(run->usage());
    }
    const Clock::time_point now = Clock::now();
    if (out.empty()) {
      if (run->watch->closed()) return false;  // releaser cancels
      if (now - run->last_write < options_.keep_alive_interval) return true;
      out = ": keep-alive\n\n";  // an SSE comment: clients skip it
    }
    if (!sink.write(out.data(), out.size())) return false;
    run->last_write = now;
    if (finished) {
      run->completed = true;
      sink.done();
    }
    return true;
  };
  // Runs when the response is done with: a stream that did not reach its end lost its client.
  auto release = [this, run](bool) {
    metrics_.stream_closed();
    if (!run->completed) {
      engine_.load()->cancel(run->id);
      log_finished(*run, 499, "cancelled (client went away)");
      return;
    }
    if (run->status == 200) {
      if (const std::optional<double> latency = run->channel->latency())
        metrics_.observe_request_latency(*latency);
    }
    const std::string outcome = run->status == 200
                                    ? std::string(finish_reason_name(run->choices.front().finish))
                                : run->status == 500 ? "error: " + run->engine_error
                                                     : "cancelled (shutting down)";
    log_finished(*run, run->status, outcome);
  };
  res.set_chunked_content_provider("text/event-stream", pump, release);
}

}  // namespace tessel::serve
