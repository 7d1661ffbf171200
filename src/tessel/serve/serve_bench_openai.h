// SPDX-License-Identifier: Apache-2.0
// The OpenAI-compatible protocol as `tessel bench serve` speaks it: request bodies for
// /v1/completions and /v1/chat/completions, and what a benchmark reads back from a response or a
// streamed chunk (the text, the server's token usage, an error). Pure functions over JSON text, so
// they are tested without a server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::serve {

enum class BenchEndpoint { kCompletions, kChat };
BenchEndpoint parse_bench_endpoint(const std::string& name);  // "completions" | "chat"
std::string endpoint_path(BenchEndpoint endpoint);  // "/v1/completions" | "/v1/chat/completions"

struct BenchRequestBody {
  std::string model;
  std::vector<int64_t> prompt_ids;  // sent as a token-id array (completions only) when non-empty
  std::string prompt_text;          // sent as text otherwise
  int64_t max_tokens = 16;
  double temperature = 0.0;
  bool stream = true;      // with stream_options.include_usage, so the last chunk has usage
  bool ignore_eos = true;  // a common server extension: exactly max_tokens come back
};
std::string request_json(BenchEndpoint endpoint, const BenchRequestBody& body);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// What one response or streamed chunk says. `text` is choices[0].text (completions) or
// choices[0].message.content / choices[0].delta.content (chat); empty when absent or null.
struct ResponsePart {
  std::string text;
  std::optional<Usage> usage;
  std::string finish_reason;
  std::string error;  // the error object's message, when the body is an error
};
// Throws Error naming what is malformed when `json` is not an object of this shape.
ResponsePart parse_response_part(std::string_view json, BenchEndpoint endpoint);

// GET /v1/models: the ids in order, and the vocabulary size where the server reports one
// (a "meta": {"n_vocab": ...}).
struct ModelList {
  std::vector<std::string> ids;
  std::optional<int64_t> vocab_size;
};
ModelList parse_model_list(std::string_view json);

}  // namespace tessel::serve
