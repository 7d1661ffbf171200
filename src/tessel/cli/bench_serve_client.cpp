// SPDX-License-Identifier: Apache-2.0
// The HTTP side of `tessel bench serve`: one cpp-httplib client (so one connection) per request,
// the response read as it arrives and, when streamed, parsed as server-sent events chunk by chunk,
// so each token's arrival time is what the client saw.
#include <httplib.h>

#include <algorithm>

#include "tessel/cli/bench_serve.h"
#include "tessel/core/error.h"
#include "tessel/serve/serve_bench_sse.h"

namespace tessel::cli {

namespace {

constexpr size_t kMaxErrorBody = 4096;  // enough of an error response for the log

double seconds_since(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

std::string transport_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "connection";
    case httplib::Error::ConnectionTimeout:
      return "connection_timeout";
    case httplib::Error::Read:
      return "read";
    case httplib::Error::Write:
      return "write";
    case httplib::Error::Canceled:
      return "canceled";
    default:
      return "transport";
  }
}

httplib::Client make_client(const ServeTarget& target, double timeout_s) {
  httplib::Client c(target.scheme_host_port);
  const auto seconds = time_t(timeout_s);
  const auto micros = time_t((timeout_s - double(seconds)) * 1e6);
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(seconds, micros);
  c.set_write_timeout(seconds, micros);
  c.set_keep_alive(false);
  return c;
}

httplib::Headers auth_headers(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

}  // namespace

ServeTarget parse_base_url(const std::string& url) {
  const size_t scheme = url.find("://");
  TESSEL_CHECK(scheme != std::string::npos &&
                   (url.compare(0, scheme, "http") == 0 || url.compare(0, scheme, "https") == 0),
               "bench serve: --url '", url,
               "' expected http://HOST:PORT (e.g. http://127.0.0.1:8000)");
  const size_t path = url.find('/', scheme + 3);
  ServeTarget t;
  t.scheme_host_port = url.substr(0, path);
  TESSEL_CHECK(t.scheme_host_port.size() > scheme + 3, "bench serve: --url '", url,
               "' has no host");
  if (path != std::string::npos) t.prefix = url.substr(path);
  while (!t.prefix.empty() && t.prefix.back() == '/') t.prefix.pop_back();
  // A base URL ending in /v1 is common in OpenAI clients' settings; the paths add it themselves.
  if (t.prefix.size() >= 3 && t.prefix.compare(t.prefix.size() - 3, 3, "/v1") == 0)
    t.prefix.resize(t.prefix.size() - 3);
  return t;
}

serve::ModelList ServeClient::models() const {
  httplib::Client c = make_client(target_, std::min(settings_.timeout_s, 30.0));
  const std::string path = target_.prefix + "/v1/models";
  httplib::Result r = c.Get(path, auth_headers(settings_.api_key));
  TESSEL_CHECK(r, "bench serve: GET ", target_.scheme_host_port, path, " failed (",
               httplib::to_string(r.error()), "); is the server running?");
  TESSEL_CHECK(r->status == 200, "bench serve: GET ", target_.scheme_host_port, path, " answered ",
               r->status, ": ", r->body.substr(0, 300));
  return serve::parse_model_list(r->body);
}

serve::RequestRecord ServeClient::send(const serve::BenchRequest& request,
                                       BenchClock::time_point run_start) const {
  serve::RequestRecord rec;
  rec.index = request.index;
  rec.max_tokens = request.max_tokens;
  if (!request.prompt_ids.empty()) rec.planned_prompt_tokens = int64_t(request.prompt_ids.size());
  serve::BenchRequestBody body;
  body.model = settings_.model;
  body.max_tokens = request.max_tokens;
  body.temperature = settings_.temperature;
  body.stream = settings_.stream;
  body.ignore_eos = settings_.ignore_eos;
  if (request.prompt_ids.empty()) {
    body.prompt_text = request.prompt_text;
  } else if (settings_.endpoint == serve::BenchEndpoint::kChat) {
    TESSEL_CHECK(
        bool(settings_.ids_to_text),
        "bench serve: the chat endpoint needs text prompts: give --dataset, or a tokenizer "
        "(-m MODEL or --tokenizer) to turn random ids into text");
    body.prompt_text = settings_.ids_to_text(request.prompt_ids);
  } else {
    body.prompt_ids = request.prompt_ids;
  }

  httplib::Request req;
  req.method = "POST";
  req.path = target_.prefix + serve::endpoint_path(settings_.endpoint);
  req.headers = auth_headers(settings_.api_key);
  req.set_header("Content-Type", "application/json");
  if (settings_.stream) req.set_header("Accept", "text/event-stream");
  req.body = serve::request_json(settings_.endpoint, body);

  int status = 0;
  std::string raw;  // a non-streamed body, or an error body
  serve::SseParser sse;
  bool done = false;
  const BenchClock::time_point start = BenchClock::now();
  const auto on_part = [&](std::string_view json) {
    serve::ResponsePart part;
    try {
      part = serve::parse_response_part(json, settings_.endpoint);
    } catch (const Error& e) {
      if (rec.error.empty()) {
        rec.error = "bad_response";
        rec.error_message = e.what();
      }
      return;
    }
    if (!part.error.empty()) {
      if (rec.error.empty()) {
        rec.error = "server_error";
        rec.error_message = part.error;
      }
      return;
    }
    if (!part.text.empty()) {
      rec.token_times_s.push_back(seconds_since(start));
      rec.text += part.text;
      ++rec.chunks;
    }
    if (part.usage) rec.usage = part.usage;
  };
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      raw.append(data, std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, raw.size())));
    } else if (settings_.stream) {
      sse.feed(std::string_view(data, n), [&](const serve::SseEvent& e) {
        if (e.done()) {
          done = true;
        } else if (e.type == "error") {
          if (rec.error.empty()) {
            rec.error = "server_error";
            rec.error_message = e.data;
          }
        } else {
          on_part(e.data);
        }
      });
    } else {
      raw.append(data, n);
    }
    return true;
  };

  httplib::Client c = make_client(target_, settings_.timeout_s);
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = c.send(req, res, err);
  const BenchClock::time_point end = BenchClock::now();
  rec.start_s = std::chrono::duration<double>(start - run_start).count();
  rec.end_s = std::chrono::duration<double>(end - run_start).count();
  if (!sent || err != httplib::Error::Success) {
    rec.error = transport_error(err);
    rec.error_message = httplib::to_string(err);
    return rec;
  }
  if (status != 200) {
    rec.error = "http_" + std::to_string(status);
    rec.error_message = raw;
    try {
      serve::ResponsePart part = serve::parse_response_part(raw, settings_.endpoint);
      if (!part.error.empty()) rec.error_message = part.error;
    } catch (const Error&) {
    }
    return rec;
  }
  if (!settings_.stream) {
    on_part(raw);
    // A whole response has no token times: no TTFT, ITL or TPOT, only its latency.
    rec.token_times_s.clear();
    return rec;
  }
  if (rec.ok() && !done) {
    rec.error = "incomplete_stream";
    rec.error_message = "the stream ended without data: [DONE]";
  }
  return rec;
}

}  // namespace tessel::cli
