// SPDX-License-Identifier: Apache-2.0
// Request bodies of the OpenAI API read into ParsedRequest: one function per group of fields, each
// refusing a wrong type or value with the field's name as OpenAI's `param`.
#include "tessel/serve/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/io/tokenizer.h"

namespace tessel::serve {

using nlohmann::json;

ApiError::ApiError(int status, const std::string& message, std::string type, std::string param,
                   std::string code)
    : std::runtime_error(message),
      status_(status),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)) {}

ApiError invalid_request(const std::string& message, const std::string& param,
                         const std::string& code) {
  return ApiError(400, message, "invalid_request_error", param, code);
}

size_t invalid_utf8_offset(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    size_t len = 0;
    uint32_t min = 0, cp = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2, min = 0x80, cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, min = 0x800, cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, min = 0x10000, cp = b & 0x07;
    } else {
      return i;
    }
    if (i + len > text.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

namespace {

std::string type_name(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

ApiError wrong_type(const std::string& name, const json& v, const std::string& expected) {
  return invalid_request(name + ": expected " + expected + ", got " + type_name(v), name);
}

// The field's value, or null when absent or JSON null (OpenAI treats both as "use the default").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number_of(const json& v, const std::string& name) {
  if (!v.is_number()) throw wrong_type(name, v, "a number");
  return v.get<double>();
}

int64_t integer_of(const json& v, const std::string& name) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      throw invalid_request(name + ": " + std::to_string(u) + " is out of range", name);
    return int64_t(u);
  }
  // 2.0 is an integer to OpenAI's validators; 2.5 is not.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) return int64_t(d);
  }
  throw wrong_type(name, v, "an integer");
}

bool bool_of(const json& v, const std::string& name) {
  if (!v.is_boolean()) throw wrong_type(name, v, "a boolean");
  return v.get<bool>();
}

std::string string_of(const json& v, const std::string& name) {
  if (!v.is_string()) throw wrong_type(name, v, "a string");
  return v.get<std::string>();
}

std::vector<int64_t> token_ids_of(const json& v, const std::string& name) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string item = name + "[" + std::to_string(i) + "]";
    ids.push_back(integer_of(v[i], item));
    if (ids.back() < 0)
      throw invalid_request(item + ": token id " + std::to_string(ids.back()) + " is negative",
                            name);
  }
  return ids;
}

void read_prompt(const json& body, ParsedRequest& out) {
  const json* p = field(body, "prompt");
  if (!p) throw invalid_request("prompt: a prompt is required", "prompt");
  if (p->is_string()) {
    out.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && p->front().is_number()) {
    out.prompt_ids = token_ids_of(*p, "prompt");
  } else if (p->is_array() && p->size() == 1 && p->front().is_string()) {
    out.prompt_text = p->front().get<std::string>();
  } else if (p->is_array() && p->size() == 1 && p->front().is_array()) {
    out.prompt_ids = token_ids_of(p->front(), "prompt[0]");
  } else if (p->is_array() && p->size() > 1) {
    throw invalid_request("prompt: " + std::to_string(p->size()) +
                              " prompts in one request; this server takes one prompt per request "
                              "(send one request each)",
                          "prompt");
  } else if (p->is_array()) {
    throw invalid_request("prompt: the prompt is empty", "prompt");
  } else {
    throw wrong_type("prompt", *p, "a string or an array of token ids");
  }
  if (out.prompt_text && out.prompt_text->empty())
    throw invalid_request("prompt: the prompt is empty", "prompt");
  if (!out.prompt_text && out.prompt_ids.empty())
    throw invalid_request("prompt: the prompt is empty", "prompt");
}

std::string message_content(const json& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw wrong_type(name, content, "a string or an array of text parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string item = name + "[" + std::to_string(i) + "]";
    if (!part.is_object()) throw wrong_type(item, part, "an object");
    const json* type = field(part, "type");
    const std::string kind = type ? string_of(*type, item + ".type") : "";
    if (kind != "text")
      throw invalid_request(item + ".type: '" + kind + "' parts are not supported (only text)",
                            item + ".type");
    const json* t = field(part, "text");
    if (!t) throw invalid_request(item + ".text is required", item + ".text");
    text += string_of(*t, item + ".text");
  }
  return text;
}

void read_messages(const json& body, ParsedRequest& out) {
  const json* m = field(body, "messages");
  if (!m) throw invalid_request("messages: a list of messages is required", "messages");
  if (!m->is_array()) throw wrong_type("messages", *m, "an array of messages");
  if (m->empty()) throw invalid_request("messages: the list of messages is empty", "messages");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) throw wrong_type(name, msg, "an object");
    const json* role = field(msg, "role");
    if (!role) throw invalid_request(name + ".role is required", name + ".role");
    ChatMessage turn{string_of(*role, name + ".role"), ""};
    static const char* const kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    if (std::find(std::begin(kRoles), std::end(kRoles), turn.role) == std::end(kRoles))
      throw invalid_request(name + ".role: '" + turn.role +
                                "' is not one of system, developer, user, assistant, tool",
                            name + ".role");
    const json* content = field(msg, "content");
    // Only an assistant turn may leave out its content (OpenAI: it then carries tool calls).
    if (content) {
      turn.content = message_content(*content, name + ".content");
    } else if (turn.role != "assistant") {
      throw invalid_request(name + ".content is required", name + ".content");
    }
    out.messages.push_back(std::move(turn));
  }
  if (const json* g = field(body, "add_generation_prompt"))
    out.add_generation_prompt = bool_of(*g, "add_generation_prompt");
}

void read_stop(const json& body, SamplingParams& p) {
  const json* s = field(body, "stop");
  if (!s) return;
  if (s->is_string()) {
    p.stop.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    for (size_t i = 0; i < s->size(); ++i)
      p.stop.push_back(string_of((*s)[i], "stop[" + std::to_string(i) + "]"));
  } else {
    throw wrong_type("stop", *s, "a string or an array of strings");
  }
  for (const std::string& stop : p.stop)
    if (stop.empty()) throw invalid_request("stop: an empty stop string", "stop");
}

void read_logprobs(const json& body, ParsedRequest& out, const ProtocolLimits& limits) {
  int64_t top = 0;
  if (out.endpoint == Endpoint::kCompletions) {
    const json* l = field(body, "logprobs");
    if (!l) return;
    if (l->is_boolean()) throw wrong_type("logprobs", *l, "an integer (alternatives per token)");
    top = integer_of(*l, "logprobs");
    out.logprobs = true;
  } else {
    const json* l = field(body, "logprobs");
    const json* t = field(body, "top_logprobs");
    out.logprobs = l && bool_of(*l, "logprobs");
    if (t) {
      top = integer_of(*t, "top_logprobs");
      if (!out.logprobs)
        throw invalid_request("top_logprobs: logprobs must be true when top_logprobs is used",
                              "top_logprobs");
    }
    if (!out.logprobs) return;
  }
  const char* name = out.endpoint == Endpoint::kCompletions ? "logprobs" : "top_logprobs";
  if (top < 0 || top > limits.max_logprobs)
    throw invalid_request(std::string(name) + ": " + std::to_string(top) + " must be in [0, " +
                              std::to_string(limits.max_logprobs) + "]",
                          name);
  out.params.logprobs = top;
}

// Fields OpenAI defines that this server does not implement: refused unless they ask for nothing.
void refuse_unsupported(const json& body, const ParsedRequest& out) {
  if (const json* b = field(body, "logit_bias")) {
    if (!b->is_object()) throw wrong_type("logit_bias", *b, "an object");
    if (!b->empty()) throw invalid_request("logit_bias is not supported", "logit_bias");
  }
  if (const json* b = field(body, "best_of")) {
    const int64_t best_of = integer_of(*b, "best_of");
    if (best_of != out.params.n)
      throw invalid_request("best_of: only best_of == n is supported", "best_of");
  }
  if (const json* s = field(body, "suffix")) {
    if (!string_of(*s, "suffix").empty())
      throw invalid_request("suffix is not supported", "suffix");
  }
  if (const json* m = field(body, "min_tokens")) {
    if (integer_of(*m, "min_tokens") != 0)
      throw invalid_request("min_tokens is not supported", "min_tokens");
  }
  if (const json* t = field(body, "tools")) {
    if (!t->is_array()) throw wrong_type("tools", *t, "an array");
    if (!t->empty()) throw invalid_request("tools are not supported", "tools");
  }
  if (const json* f = field(body, "response_format")) {
    const json* type = f->is_object() ? field(*f, "type") : nullptr;
    if (!type || !type->is_string() || type->get<std::string>() != "text")
      throw invalid_request("response_format: only {\"type\": \"text\"} is supported",
                            "response_format");
  }
  if (out.echo && out.logprobs)
    throw invalid_request("echo with logprobs is not supported (it needs prompt logprobs)", "echo");
}

void read_sampling(const json& body, ParsedRequest& out, const ProtocolLimits& limits) {
  SamplingParams& p = out.params;
  if (const json* v = field(body, "temperature")) p.temperature = number_of(*v, "temperature");
  if (const json* v = field(body, "top_p")) p.top_p = number_of(*v, "top_p");
  if (const json* v = field(body, "top_k")) {
    p.top_k = integer_of(*v, "top_k");
    if (p.top_k == -1) p.top_k = 0;  // vLLM's spelling of "no limit"
  }
  if (const json* v = field(body, "min_p")) p.min_p = number_of(*v, "min_p");
  if (const json* v = field(body, "repetition_penalty"))
    p.repetition_penalty = number_of(*v, "repetition_penalty");
  if (const json* v = field(body, "presence_penalty"))
    p.presence_penalty = number_of(*v, "presence_penalty");
  if (const json* v = field(body, "frequency_penalty"))
    p.frequency_penalty = number_of(*v, "frequency_penalty");
  if (const json* v = field(body, "seed")) p.seed = uint64_t(integer_of(*v, "seed"));
  if (const json* v = field(body, "n")) p.n = integer_of(*v, "n");
  if (p.n < 1 || p.n > limits.max_n)
    throw invalid_request("n: " + std::to_string(p.n) + " must be in [1, " +
                              std::to_string(limits.max_n) + "] (--max-n)",
                          "n");
  // Chat's newer name wins over the deprecated one when both are sent, as OpenAI documents.
  const char* max_name = "max_tokens";
  const json* max = field(body, "max_tokens");
  if (out.endpoint == Endpoint::kChat) {
    if (const json* v = field(body, "max_completion_tokens"))
      max = v, max_name = "max_completion_tokens";
  }
  if (max) {
    p.max_tokens = integer_of(*max, max_name);
    out.max_tokens_given = true;
    if (p.max_tokens < 1)
      throw invalid_request(
          std::string(max_name) + ": " + std::to_string(p.max_tokens) + " must be >= 1", max_name);
  }
  read_stop(body, p);
  if (const json* v = field(body, "stop_token_ids")) {
    if (!v->is_array()) throw wrong_type("stop_token_ids", *v, "an array of token ids");
    p.stop_token_ids = token_ids_of(*v, "stop_token_ids");
  }
  if (const json* v = field(body, "ignore_eos")) p.ignore_eos = bool_of(*v, "ignore_eos");
  read_logprobs(body, out, limits);
}

}  // namespace

ParsedRequest parse_request(Endpoint endpoint, std::string_view body,
                            const ProtocolLimits& limits) {
  const size_t bad = invalid_utf8_offset(body);
  if (bad != std::string_view::npos)
    throw invalid_request("the request body is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  json doc;
  try {
    doc = json::parse(body);
  } catch (const json::parse_error& e) {
    throw invalid_request(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) throw invalid_request("the request body must be a JSON object");
  ParsedRequest out;
  out.endpoint = endpoint;
  // Absent: the served model (vLLM's leniency; OpenAI requires the field).
  if (const json* model = field(doc, "model")) out.model = string_of(*model, "model");
  if (endpoint == Endpoint::kCompletions) {
    read_prompt(doc, out);
    if (const json* e = field(doc, "echo")) out.echo = bool_of(*e, "echo");
  } else {
    read_messages(doc, out);
  }
  read_sampling(doc, out, limits);
  if (const json* s = field(doc, "stream")) out.stream = bool_of(*s, "stream");
  if (const json* o = field(doc, "stream_options")) {
    if (!out.stream)
      throw invalid_request("stream_options: only allowed when stream is true", "stream_options");
    if (!o->is_object()) throw wrong_type("stream_options", *o, "an object");
    if (const json* u = field(*o, "include_usage"))
      out.include_usage = bool_of(*u, "stream_options.include_usage");
  }
  if (const json* u = field(doc, "user")) string_of(*u, "user");
  refuse_unsupported(doc, out);
  return out;
}

PreparedPrompt prepare_prompt(const ParsedRequest& request, const std::string& prompt_text,
                              const io::Tokenizer& tokenizer, int64_t context_length) {
  PreparedPrompt out{{}, request.params};
  if (request.endpoint == Endpoint::kChat) {
    for (int32_t id : tokenizer.encode(prompt_text, /*allow_special=*/true)) out.ids.push_back(id);
  } else if (request.prompt_text) {
    for (int32_t id : tokenizer.encode_with_special_tokens(*request.prompt_text, true))
      out.ids.push_back(id);
  } else {
    out.ids = request.prompt_ids;
  }
  const char* what = request.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (out.ids.empty()) throw invalid_request(std::string(what) + ": the prompt is empty", what);
  const int64_t vocab = tokenizer.vocab_size();
  for (int64_t id : out.ids)
    if (id >= vocab)
      throw invalid_request("prompt: token id " + std::to_string(id) + " is out of range [0, " +
                                std::to_string(vocab) + ")",
                            "prompt");
  for (int64_t id : out.params.stop_token_ids)
    if (id >= vocab)
      throw invalid_request("stop_token_ids: token id " + std::to_string(id) +
                                " is out of range [0, " + std::to_string(vocab) + ")",
                            "stop_token_ids");
  const int64_t prompt_tokens = int64_t(out.ids.size());
  if (!request.max_tokens_given) {
    out.params.max_tokens = request.endpoint == Endpoint::kChat
                                ? std::max<int64_t>(context_length - prompt_tokens, 0)
                                : 16;
    if (request.endpoint == Endpoint::kCompletions)
      out.params.max_tokens = std::min(out.params.max_tokens, context_length - prompt_tokens);
  }
  const int64_t total = prompt_tokens + out.params.max_tokens;
  if (prompt_tokens >= context_length || total > context_length || out.params.max_tokens < 1) {
    throw invalid_request("This model's maximum context length is " +
                              std::to_string(context_length) + " tokens. However, you requested " +
                              std::to_string(total) + " tokens (" + std::to_string(prompt_tokens) +
                              " in the " + what + ", " + std::to_string(out.params.max_tokens) +
                              " in the completion). Please reduce the length of the " + what +
                              " or completion.",
                          what, "context_length_exceeded");
  }
  try {
    out.params.validate();
  } catch (const Error& e) {
    // validate() names the field first ("top_p 1.5 must be in (0, 1]").
    const std::string message = e.what();
    std::string param = message.substr(0, message.find(' '));
    if (!param.empty() && param.back() == ':') param.pop_back();
    throw invalid_request(message, param);
  }
  return out;
}

}  // namespace tessel::serve
