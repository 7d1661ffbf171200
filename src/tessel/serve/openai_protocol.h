// SPDX-License-Identifier: Apache-2.0
// The OpenAI-compatible request bodies (/v1/completions, /v1/chat/completions) read into what the
// engine takes: field types and ranges checked the way OpenAI's API and vLLM's server check them,
// each refusal an ApiError naming the field (`param`) with the HTTP status it is answered with.
// Unknown fields are ignored, as OpenAI and vLLM do (docs/SERVING.md, "HTTP API").
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/serve/chat_template.h"
#include "tessel/serve/request.h"

namespace tessel::serve {

// A refusal in OpenAI's error object: {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string type, std::string param = "",
           std::string code = "");
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // "" -> null
  const std::string& code() const { return code_; }    // "" -> null

 private:
  int status_;
  std::string type_, param_, code_;
};

// 400 invalid_request_error naming `param`.
ApiError invalid_request(const std::string& message, const std::string& param = "",
                         const std::string& code = "");

enum class Endpoint { kCompletions, kChat };

// A request body, checked, before tokenization.
struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                       // "" when absent: the served model
  std::optional<std::string> prompt_text;  // completions: a text prompt
  std::vector<int64_t> prompt_ids;         // completions: a token-id prompt
  // Chat: the turns as sent (content given as a list of text parts is joined).
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;  // chat (vLLM extra)
  SamplingParams params;              // max_tokens as sent (see max_tokens_given)
  bool max_tokens_given = false;      // absent: completions 16, chat the rest of the context
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt text before the completion
  // Logprobs asked for: completions `logprobs: N` (N alternatives), chat `logprobs: true` with
  // `top_logprobs: N`; params.logprobs holds N.
  bool logprobs = false;
};

struct ProtocolLimits {
  int64_t max_n = 16;
  int64_t max_logprobs = 20;
};

// Parses and checks a body; throws ApiError (400) for malformed JSON, invalid UTF-8, wrong types,
// out-of-range values and unsupported fields.
ParsedRequest parse_request(Endpoint endpoint, std::string_view body, const ProtocolLimits& limits);

// The token ids of the prompt and the final sampling parameters: completions text is encoded
// with the tokenizer's BOS/EOS settings, chat text (already holding the template's special tokens)
// as it is; special tokens spelled in the text are recognised (as Hugging Face tokenizers do).
// Checks the ids against the vocabulary, the length against the context (OpenAI's
// context_length_exceeded wording) and SamplingParams::validate(); throws ApiError (400).
struct PreparedPrompt {
  std::vector<int64_t> ids;
  SamplingParams params;
};
PreparedPrompt prepare_prompt(const ParsedRequest& request, const std::string& prompt_text,
                              const io::Tokenizer& tokenizer, int64_t context_length);

// The first ill-formed byte of `text` as UTF-8, or npos.
size_t invalid_utf8_offset(std::string_view text);

}  // namespace tessel::serve
