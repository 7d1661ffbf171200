// SPDX-License-Identifier: Apache-2.0
// Request bodies of the OpenAI API: every field read with its default, and every bad input
// refused with status 400, OpenAI's error type and the field named as `param`.
#include "tessel/serve/openai_protocol.h"

#include <gtest/gtest.h>

#include "common/tokenizer_test_util.h"

namespace tessel::serve {
namespace {

const ProtocolLimits kLimits{4, 20};

ParsedRequest parse(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  return parse_request(endpoint, body, kLimits);
}

// The ApiError a body is refused with.
ApiError refusal(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  try {
    parse(body, endpoint);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "", "");
}

void expect_refused(const std::string& body, const std::string& param, const std::string& words,
                    Endpoint endpoint = Endpoint::kCompletions) {
  const ApiError e = refusal(body, endpoint);
  EXPECT_EQ(e.status(), 400) << body;
  EXPECT_EQ(e.type(), "invalid_request_error") << body;
  EXPECT_EQ(e.param(), param) << body << ": " << e.what();
  EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
}

TEST(OpenAiProtocol, CompletionFieldsAndDefaults) {
  const ParsedRequest r = parse(R"({"model": "m", "prompt": "Hi", "unknown_field": [1]})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "Hi");
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_EQ(r.params.temperature, 1.0);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.params.logprobs.has_value());

  const ParsedRequest full = parse(R"({"model": "m", "prompt": [5, 6, 7], "max_tokens": 9,
      "temperature": 0, "top_p": 0.5, "n": 2, "stream": true,
      "stream_options": {"include_usage": true}, "stop": "END", "seed": 42,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "logprobs": 3, "top_k": -1, "min_p": 0.1,
      "repetition_penalty": 1.2, "ignore_eos": true, "stop_token_ids": [1, 2], "user": "u",
      "logit_bias": {}, "best_of": 2, "echo": false, "suffix": null})");
  EXPECT_EQ(full.prompt_ids, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_FALSE(full.prompt_text.has_value());
  EXPECT_TRUE(full.max_tokens_given);
  EXPECT_EQ(full.params.max_tokens, 9);
  EXPECT_EQ(full.params.temperature, 0.0);
  EXPECT_EQ(full.params.top_p, 0.5);
  EXPECT_EQ(full.params.n, 2);
  EXPECT_TRUE(full.stream);
  EXPECT_TRUE(full.include_usage);
  EXPECT_EQ(full.params.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(full.params.seed, 42u);
  EXPECT_EQ(full.params.presence_penalty, 0.5);
  EXPECT_EQ(full.params.frequency_penalty, -0.5);
  EXPECT_TRUE(full.logprobs);
  EXPECT_EQ(full.params.logprobs, 3);
  EXPECT_EQ(full.params.top_k, 0);  // vLLM's -1
  EXPECT_EQ(full.params.min_p, 0.1);
  EXPECT_EQ(full.params.repetition_penalty, 1.2);
  EXPECT_TRUE(full.params.ignore_eos);
  EXPECT_EQ(full.params.stop_token_ids, (std::vector<int64_t>{1, 2}));
}

TEST(OpenAiProtocol, PromptForms) {
  EXPECT_EQ(parse(R"({"prompt": ["one"]})").prompt_text, "one");
  EXPECT_EQ(parse(R"({"prompt": [[3, 4]]})").prompt_ids, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(parse(R"({"prompt": [3.0]})").prompt_ids, (std::vector<int64_t>{3}));
  expect_refused(R"({"prompt": ["a", "b"]})", "prompt", "one prompt per request");
  expect_refused(R"({"prompt": [[1], [2]]})", "prompt", "one prompt per request");
  expect_refused(R"({"prompt": ""})", "prompt", "empty");
  expect_refused(R"({"prompt": []})", "prompt", "empty");
  expect_refused(R"({"model": "m"})", "prompt", "required");
  expect_refused(R"({"prompt": 5})", "prompt", "got a number");
  expect_refused(R"({"prompt": [1, -2]})", "prompt", "negative");
  expect_refused(R"({"prompt": [1, 2.5]})", "prompt[1]", "integer");
}

TEST(OpenAiProtocol, ChatMessages) {
  const ParsedRequest r = parse(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}], "max_completion_tokens": 5, "max_tokens": 9,
      "logprobs": true, "top_logprobs": 2})",
                                Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.params.max_tokens, 5);  // max_completion_tokens wins
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_EQ(parse(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})",
                  Endpoint::kChat)
                .params.logprobs,
            0);
  expect_refused(R"({"messages": []})", "messages", "empty", Endpoint::kChat);
  expect_refused(R"({"model": "m"})", "messages", "required", Endpoint::kChat);
  expect_refused(R"({"messages": {"role": "user"}})", "messages", "an array", Endpoint::kChat);
  expect_refused(R"({"messages": [{"content": "x"}]})", "messages[0].role", "required",
                 Endpoint::kChat);
  expect_refused(R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role",
                 "wizard", Endpoint::kChat);
  expect_refused(R"({"messages": [{"role": "user"}]})", "messages[0].content", "required",
                 Endpoint::kChat);
  expect_refused(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                 "messages[0].content[0].type", "not supported", Endpoint::kChat);
  expect_refused(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
                 "top_logprobs", "logprobs must be true", Endpoint::kChat);
  expect_refused(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 3})", "logprobs",
                 "boolean", Endpoint::kChat);
}

TEST(OpenAiProtocol, MalformedBodies) {
  expect_refused("{\"prompt\": \"a\"", "", "not valid JSON");
  expect_refused("[1, 2]", "", "JSON object");
  expect_refused("", "", "not valid JSON");
  expect_refused("{\"prompt\": \"a\xff\"}", "", "not valid UTF-8");
  expect_refused("{\"prompt\": \"\xc0\xaf\"}", "", "not valid UTF-8");  // overlong '/'
  expect_refused(R"({"prompt": "\ud800"})", "", "not valid JSON");      // lone surrogate
}

TEST(OpenAiProtocol, WrongTypesNameTheField) {
  expect_refused(R"({"prompt": "a", "temperature": "hot"})", "temperature", "a number");
  expect_refused(R"({"prompt": "a", "temperature": true})", "temperature", "a boolean");
  expect_refused(R"({"prompt": "a", "max_tokens": 1.5})", "max_tokens", "integer");
  expect_refused(R"({"prompt": "a", "n": "2"})", "n", "integer");
  expect_refused(R"({"prompt": "a", "stream": 1})", "stream", "boolean");
  expect_refused(R"({"prompt": "a", "stop": 7})", "stop", "string");
  expect_refused(R"({"prompt": "a", "stop": ["x", 7]})", "stop[1]", "string");
  expect_refused(R"({"prompt": "a", "model": 3})", "model", "string");
  expect_refused(R"({"prompt": "a", "logprobs": true})", "logprobs", "integer");
  expect_refused(R"({"prompt": "a", "stop_token_ids": 3})", "stop_token_ids", "array");
  expect_refused(R"({"prompt": "a", "user": 3})", "user", "string");
  expect_refused(R"({"prompt": "a", "seed": 1e300})", "seed", "integer");
}

TEST(OpenAiProtocol, OutOfRangeAndUnsupported) {
  expect_refused(R"({"prompt": "a", "max_tokens": 0})", "max_tokens", ">= 1");
  expect_refused(R"({"prompt": "a", "max_tokens": -5})", "max_tokens", ">= 1");
  expect_refused(R"({"prompt": "a", "n": 5})", "n", "[1, 4]");
  expect_refused(R"({"prompt": "a", "n": 0})", "n", "[1, 4]");
  expect_refused(R"({"prompt": "a", "logprobs": 21})", "logprobs", "[0, 20]");
  expect_refused(R"({"prompt": "a", "logprobs": -1})", "logprobs", "[0, 20]");
  expect_refused(R"({"prompt": "a", "stop": ["x", ""]})", "stop", "empty");
  expect_refused(R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options",
                 "stream is true");
  expect_refused(R"({"prompt": "a", "logit_bias": {"5": 10}})", "logit_bias", "not supported");
  expect_refused(R"({"prompt": "a", "best_of": 3})", "best_of", "best_of == n");
  expect_refused(R"({"prompt": "a", "suffix": "tail"})", "suffix", "not supported");
  expect_refused(R"({"prompt": "a", "echo": true, "logprobs": 1})", "echo", "not supported");
  expect_refused(R"({"prompt": "a", "min_tokens": 3})", "min_tokens", "not supported");
  expect_refused(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})", "tools",
                 "not supported", Endpoint::kChat);
}

class PreparePrompt : public ::testing::Test {
 protected:
  PreparePrompt() : tokenizer_(io::small_config()) {}
  io::Tokenizer tokenizer_;
};

TEST_F(PreparePrompt, EncodesAndAppliesDefaults) {
  const ParsedRequest r = parse(R"({"prompt": " the end"})");
  const PreparedPrompt p = prepare_prompt(r, "", tokenizer_, 64);
  std::vector<int64_t> expected;
  for (int32_t id : tokenizer_.encode(" the end")) expected.push_back(id);
  EXPECT_EQ(p.ids, expected);
  EXPECT_EQ(p.params.max_tokens, 16);
  // Chat without max_tokens: the rest of the context.
  const ParsedRequest chat =
      parse(R"({"messages": [{"role": "user", "content": "x"}]})", Endpoint::kChat);
  const PreparedPrompt c = prepare_prompt(chat, "abc", tokenizer_, 64);
  EXPECT_EQ(c.ids.size(), 3u);
  EXPECT_EQ(c.params.max_tokens, 61);
  // A completion whose prompt leaves fewer than 16 tokens gets what is left.
  EXPECT_EQ(prepare_prompt(parse(R"({"prompt": [1, 2, 3, 4, 5, 6]})"), "", tokenizer_, 10)
                .params.max_tokens,
            4);
}

TEST_F(PreparePrompt, RefusesWhatTheModelCannotTake) {
  auto refused = [&](const std::string& body, int64_t context, const std::string& param,
                     const std::string& words) {
    try {
      prepare_prompt(parse(body), "", tokenizer_, context);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), param) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused(R"({"prompt": [1, 2, 3], "max_tokens": 8})", 10, "prompt",
          "maximum context length is 10 tokens. However, you requested 11 tokens");
  refused(R"({"prompt": [1, 2, 3, 4]})", 4, "prompt", "maximum context length");
  refused(R"({"prompt": [1, 262]})", 64, "prompt", "out of range [0, 262)");
  refused(R"({"prompt": "a", "stop_token_ids": [999]})", 64, "stop_token_ids", "out of range");
  refused(R"({"prompt": "a", "temperature": -1})", 64, "temperature", "[0, 100]");
  refused(R"({"prompt": "a", "top_p": 1.5})", 64, "top_p", "(0, 1]");
  refused(R"({"prompt": "a", "min_p": 2})", 64, "min_p", "[0, 1]");
  refused(R"({"prompt": "a", "presence_penalty": 3})", 64, "presence_penalty", "[-2, 2]");
  refused(R"({"prompt": "a", "frequency_penalty": -3})", 64, "frequency_penalty", "[-2, 2]");
  refused(R"({"prompt": "a", "repetition_penalty": 0})", 64, "repetition_penalty", "(0, 100]");
  refused(R"({"prompt": "a", "top_k": -4})", 64, "top_k", ">= 0");
  try {
    prepare_prompt(parse(R"({"prompt": [1, 2, 3], "max_tokens": 8})"), "", tokenizer_, 10);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), "context_length_exceeded");
  }
}

TEST(Utf8, FindsTheFirstIllFormedByte) {
  EXPECT_EQ(invalid_utf8_offset("plain"), std::string::npos);
  EXPECT_EQ(invalid_utf8_offset("caf\xc3\xa9 \xf0\x9f\x98\x80"), std::string::npos);
  EXPECT_EQ(invalid_utf8_offset("ab\x80"), 2u);
  EXPECT_EQ(invalid_utf8_offset("a\xe2\x82"), 1u);          // cut short
  EXPECT_EQ(invalid_utf8_offset("\xed\xa0\x80"), 0u);       // a UTF-16 surrogate
  EXPECT_EQ(invalid_utf8_offset("x\xf4\x90\x80\x80"), 1u);  // past U+10FFFF
}

}  // namespace
}  // namespace tessel::serve
