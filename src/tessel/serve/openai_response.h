// SPDX-License-Identifier: Apache-2.0
// OpenAI's response shapes from the engine's deltas: the whole completion (text_completion,
// chat.completion), the streamed chunks as server-sent events (`data: {json}\n\n`, a usage chunk
// with stream_options.include_usage, `data: [DONE]\n\n`), logprobs in the completions shape
// (tokens, token_logprobs, top_logprobs, text_offset) and the chat shape (content[{token, logprob,
// bytes, top_logprobs}]), and the error object.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessel/serve/openai_protocol.h"
#include "tessel/serve/request.h"

namespace tessel::serve {

// The bytes a token id spells (may be part of a UTF-8 character).
using TokenBytes = std::function<std::string(int64_t)>;

struct ResponseHead {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  Endpoint endpoint = Endpoint::kCompletions;
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// Everything one choice produced.
struct ChoiceOutput {
  std::string text;
  std::vector<int64_t> tokens;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::kNone;
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

nlohmann::json usage_json(const Usage& usage);
// {"error": {"message", "type", "param", "code"}}, param and code null when empty.
nlohmann::json error_json(const ApiError& error);
// JSON text with ill-formed UTF-8 (a token that is part of a character) replaced by U+FFFD.
std::string dump_json(const nlohmann::json& value);
// "data: <json>\n\n"; kSseDone ends a stream.
std::string sse_event(const nlohmann::json& value);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// The completions logprobs object for `logprobs`; text_offset continues from `offset` (characters
// of the choice's text so far, advanced past these tokens).
nlohmann::json completion_logprobs(const std::vector<TokenLogprob>& logprobs,
                                   const TokenBytes& bytes, int64_t& offset);
// The chat logprobs object: {"content": [{token, logprob, bytes, top_logprobs}]}.
nlohmann::json chat_logprobs(const std::vector<TokenLogprob>& logprobs, const TokenBytes& bytes);

// The non-streamed response. `echo_text` is put before each completions choice's text.
nlohmann::json full_response(const ResponseHead& head, const std::vector<ChoiceOutput>& choices,
                             const Usage& usage, bool logprobs, const TokenBytes& bytes,
                             const std::string& echo_text = "");

// The chunks of one streamed response, choice by choice as the deltas arrive.
class StreamEncoder {
 public:
  StreamEncoder(ResponseHead head, int64_t n, bool logprobs, bool include_usage,
                std::string echo_text, TokenBytes bytes);
  // The events for one delta ("" for a delta that carries nothing to send).
  std::string encode(const Delta& delta);
  // The usage chunk (with include_usage) and [DONE].
  std::string finish(const Usage& usage) const;
  // An error after the stream has started: data: {"error": ...}, then [DONE].
  static std::string error(const ApiError& error);

 private:
  nlohmann::json chunk(nlohmann::json choice) const;

  ResponseHead head_;
  bool logprobs_, include_usage_;
  std::string echo_text_;
  TokenBytes bytes_;
  std::vector<bool> started_;         // per choice: first chunk sent (chat: role; echo: prompt)
  std::vector<int64_t> text_offset_;  // per choice, completions logprobs
};

}  // namespace tessel::serve
