// SPDX-License-Identifier: Apache-2.0
// The response objects of OpenAI's completions and chat completions APIs (their published
// shapes), built from the engine's per-choice deltas.
#include "tessel/serve/openai_response.h"

namespace tessel::serve {

using nlohmann::json;

namespace {

// Characters (code points) in `bytes`, for text_offset: continuation bytes do not start one.
int64_t characters(const std::string& bytes) {
  int64_t n = 0;
  for (unsigned char c : bytes) n += (c & 0xC0) != 0x80;
  return n;
}

// A token's text as a JSON string: its bytes when they are UTF-8, else vLLM's "bytes:\xNN..."
// spelling, so that a token holding part of a character is still told apart from U+FFFD.
std::string token_string(const std::string& bytes) {
  if (invalid_utf8_offset(bytes) == std::string::npos) return bytes;
  static const char* const kHex = "0123456789abcdef";
  std::string out = "bytes:";
  for (unsigned char c : bytes) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

json byte_list(const std::string& bytes) {
  json list = json::array();
  for (unsigned char c : bytes) list.push_back(int(c));
  return list;
}

json finish_json(FinishReason reason) {
  if (reason == FinishReason::kNone) return nullptr;
  return std::string(finish_reason_name(reason));
}

const char* object_name(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

}  // namespace

json usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json error_json(const ApiError& error) {
  json param = error.param().empty() ? json(nullptr) : json(error.param());
  json code = error.code().empty() ? json(nullptr) : json(error.code());
  return {{"error",
           {{"message", error.what()}, {"type", error.type()}, {"param", param}, {"code", code}}}};
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& value) {
  return "data: " + dump_json(value) + "\n\n";
}

json completion_logprobs(const std::vector<TokenLogprob>& logprobs, const TokenBytes& bytes,
                         int64_t& offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const TokenLogprob& lp : logprobs) {
    const std::string b = bytes(lp.token);
    tokens.push_back(token_string(b));
    token_logprobs.push_back(lp.logprob);
    json alternatives = json::object();
    for (const auto& [id, logprob] : lp.top) alternatives[token_string(bytes(id))] = logprob;
    top.push_back(std::move(alternatives));
    offsets.push_back(offset);
    offset += characters(b);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json chat_logprobs(const std::vector<TokenLogprob>& logprobs, const TokenBytes& bytes) {
  json content = json::array();
  for (const TokenLogprob& lp : logprobs) {
    const std::string b = bytes(lp.token);
    json top = json::array();
    for (const auto& [id, logprob] : lp.top) {
      const std::string alt = bytes(id);
      top.push_back(
          {{"token", token_string(alt)}, {"logprob", logprob}, {"bytes", byte_list(alt)}});
    }
    content.push_back({{"token", token_string(b)},
                       {"logprob", lp.logprob},
                       {"bytes", byte_list(b)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json full_response(const ResponseHead& head, const std::vector<ChoiceOutput>& choices,
                   const Usage& usage, bool logprobs, const TokenBytes& bytes,
                   const std::string& echo_text) {
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    json choice = {{"index", i}};
    int64_t offset = characters(echo_text);
    if (head.endpoint == Endpoint::kCompletions) {
      choice["text"] = echo_text + c.text;
      choice["logprobs"] = logprobs ? completion_logprobs(c.logprobs, bytes, offset) : json();
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = logprobs ? chat_logprobs(c.logprobs, bytes) : json();
    }
    choice["finish_reason"] = finish_json(c.finish);
    list.push_back(std::move(choice));
  }
  return {{"id", head.id},           {"object", object_name(head.endpoint, false)},
          {"created", head.created}, {"model", head.model},
          {"choices", list},         {"usage", usage_json(usage)}};
}

StreamEncoder::StreamEncoder(ResponseHead head, int64_t n, bool logprobs, bool include_usage,
                             std::string echo_text, TokenBytes bytes)
    : head_(std::move(head)),
      logprobs_(logprobs),
      include_usage_(include_usage),
      echo_text_(std::move(echo_text)),
      bytes_(std::move(bytes)),
      started_(size_t(n), false),
      text_offset_(size_t(n), characters(echo_text_)) {}

json StreamEncoder::chunk(json choice) const {
  json out = {{"id", head_.id},
              {"object", object_name(head_.endpoint, true)},
              {"created", head_.created},
              {"model", head_.model},
              {"choices", json::array({std::move(choice)})}};
  // OpenAI: with include_usage every chunk carries "usage": null but the last one.
  if (include_usage_) out["usage"] = nullptr;
  return out;
}

std::string StreamEncoder::encode(const Delta& delta) {
  const auto i = size_t(delta.index);
  if (i >= started_.size() || delta.finish == FinishReason::kCancelled) return "";
  std::string events;
  const bool chat = head_.endpoint == Endpoint::kChat;
  if (!started_[i]) {
    started_[i] = true;
    // Chat streams open each choice with the assistant's role; an echoed prompt comes first.
    if (chat) {
      events += sse_event(chunk({{"index", i},
                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}));
    } else if (!echo_text_.empty()) {
      events += sse_event(chunk(
          {{"index", i}, {"text", echo_text_}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
    }
  }
  if (delta.text.empty() && delta.logprobs.empty() && delta.finish == FinishReason::kNone)
    return events;
  json choice = {{"index", i}};
  json logprobs;
  if (logprobs_) {
    logprobs = chat ? chat_logprobs(delta.logprobs, bytes_)
                    : completion_logprobs(delta.logprobs, bytes_, text_offset_[i]);
  }
  if (chat) {
    choice["delta"] = delta.text.empty() ? json::object() : json{{"content", delta.text}};
  } else {
    choice["text"] = delta.text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_json(delta.finish);
  return events + sse_event(chunk(std::move(choice)));
}

std::string StreamEncoder::finish(const Usage& usage) const {
  std::string events;
  if (include_usage_) {
    json last = chunk(nullptr);
    last["choices"] = json::array();
    last["usage"] = usage_json(usage);
    events += sse_event(last);
  }
  return events + kSseDone;
}

std::string StreamEncoder::error(const ApiError& error) {
  return sse_event(error_json(error)) + kSseDone;
}

}  // namespace tessel::serve
