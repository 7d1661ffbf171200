// SPDX-License-Identifier: Apache-2.0
// Request bodies and response parsing of the OpenAI completions and chat completions APIs for
// `tessel bench serve` (field names from OpenAI's API reference; ignore_eos is an extension
// that vLLM and other servers accept).
#include "tessel/serve/serve_bench_openai.h"

#include <nlohmann/json.hpp>

#include "tessel/core/error.h"

namespace tessel::serve {

using nlohmann::json;

BenchEndpoint parse_bench_endpoint(const std::string& name) {
  if (name == "completions") return BenchEndpoint::kCompletions;
  if (name == "chat") return BenchEndpoint::kChat;
  TESSEL_CHECK(false, "bench serve: endpoint '", name, "' expected completions or chat");
  return BenchEndpoint::kCompletions;
}

std::string endpoint_path(BenchEndpoint endpoint) {
  return endpoint == BenchEndpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

std::string request_json(BenchEndpoint endpoint, const BenchRequestBody& b) {
  json j = {{"model", b.model}, {"max_tokens", b.max_tokens}, {"temperature", b.temperature}};
  if (endpoint == BenchEndpoint::kChat) {
    TESSEL_CHECK(b.prompt_ids.empty(), "bench serve: the chat endpoint takes text, not token ids");
    j["messages"] = json::array({{{"role", "user"}, {"content", b.prompt_text}}});
  } else if (!b.prompt_ids.empty()) {
    j["prompt"] = b.prompt_ids;
  } else {
    j["prompt"] = b.prompt_text;
  }
  if (b.stream) {
    j["stream"] = true;
    j["stream_options"] = {{"include_usage", true}};
  }
  if (b.ignore_eos) j["ignore_eos"] = true;
  // Text from a tokenizer's decode is valid UTF-8; a dataset line that is not is replaced, not
  // refused, since the benchmark only needs some prompt of about that length.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

json parse_object(std::string_view text, const char* what) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  TESSEL_CHECK(!j.is_discarded() && j.is_object(), "bench serve: ", what,
               " is not a JSON object: '", std::string(text.substr(0, 200)), "'");
  return j;
}

std::string string_or_empty(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

ResponsePart parse_response_part(std::string_view text, BenchEndpoint endpoint) {
  const json j = parse_object(text, "a response");
  ResponsePart part;
  if (auto e = j.find("error"); e != j.end()) {
    part.error = e->is_object() ? string_or_empty(*e, "message") : e->dump();
    if (part.error.empty()) part.error = e->dump();
    return part;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    Usage usage;
    usage.prompt_tokens = u->value("prompt_tokens", int64_t(0));
    usage.completion_tokens = u->value("completion_tokens", int64_t(0));
    part.usage = usage;
  }
  auto choices = j.find("choices");
  TESSEL_CHECK(choices != j.end() && choices->is_array(), "bench serve: a response without a ",
               "'choices' array: '", std::string(text.substr(0, 200)), "'");
  if (choices->empty()) return part;  // the usage-only chunk of stream_options.include_usage
  const json& c = choices->front();
  TESSEL_CHECK(c.is_object(), "bench serve: choices[0] is not an object");
  part.finish_reason = string_or_empty(c, "finish_reason");
  if (endpoint == BenchEndpoint::kCompletions) {
    part.text = string_or_empty(c, "text");
  } else if (auto d = c.find("delta"); d != c.end() && d->is_object()) {
    part.text = string_or_empty(*d, "content");
  } else if (auto m = c.find("message"); m != c.end() && m->is_object()) {
    part.text = string_or_empty(*m, "content");
  }
  return part;
}

ModelList parse_model_list(std::string_view text) {
  const json j = parse_object(text, "GET /v1/models");
  auto data = j.find("data");
  TESSEL_CHECK(data != j.end() && data->is_array(),
               "bench serve: GET /v1/models has no 'data' array: '",
               std::string(text.substr(0, 200)), "'");
  ModelList list;
  for (const json& m : *data) {
    if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
    list.ids.push_back(m["id"].get<std::string>());
    if (!list.vocab_size) {
      auto meta = m.find("meta");
      if (meta != m.end() && meta->is_object() && meta->contains("n_vocab") &&
          (*meta)["n_vocab"].is_number_integer())
        list.vocab_size = (*meta)["n_vocab"].get<int64_t>();
    }
  }
  return list;
}

}  // namespace tessel::serve
