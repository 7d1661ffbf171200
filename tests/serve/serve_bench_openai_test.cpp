// SPDX-License-Identifier: Apache-2.0
// What `tessel bench serve` sends to and reads from an OpenAI-compatible server: request bodies for
// both endpoints, streamed chunks and whole responses of both, usage, errors, the model list.
#include "tessel/serve/serve_bench_openai.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error_text.h"

namespace tessel::serve {
namespace {

using nlohmann::json;
using test::expect_error;

TEST(ServeBenchOpenAi, CompletionsBodyWithTokenIds) {
  BenchRequestBody b;
  b.model = "gpt2";
  b.prompt_ids = {5, 0, 50256};
  b.max_tokens = 128;
  const json j = json::parse(request_json(BenchEndpoint::kCompletions, b));
  EXPECT_EQ(j["model"], "gpt2");
  EXPECT_EQ(j["prompt"], json({5, 0, 50256}));
  EXPECT_EQ(j["max_tokens"], 128);
  EXPECT_EQ(j["temperature"], 0.0);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(endpoint_path(BenchEndpoint::kCompletions), "/v1/completions");
}

TEST(ServeBenchOpenAi, ChatBodyWithTextAndNoStream) {
  BenchRequestBody b;
  b.model = "m";
  b.prompt_text = "Hello \"there\"\n";
  b.stream = false;
  b.ignore_eos = false;
  const json j = json::parse(request_json(BenchEndpoint::kChat, b));
  EXPECT_EQ(j["messages"], json::array({{{"role", "user"}, {"content", "Hello \"there\"\n"}}}));
  EXPECT_FALSE(j.contains("prompt"));
  EXPECT_FALSE(j.contains("stream"));
  EXPECT_FALSE(j.contains("stream_options"));
  EXPECT_FALSE(j.contains("ignore_eos"));
  EXPECT_EQ(endpoint_path(parse_bench_endpoint("chat")), "/v1/chat/completions");
  b.prompt_ids = {1};
  expect_error([&] { request_json(BenchEndpoint::kChat, b); }, {"chat", "token ids"});
  expect_error([] { parse_bench_endpoint("embeddings"); }, {"embeddings", "completions or chat"});
}

TEST(ServeBenchOpenAi, InvalidUtf8InAPromptIsReplacedNotRefused) {
  BenchRequestBody b;
  b.prompt_text = std::string("caf\xc3", 4);
  const json j = json::parse(request_json(BenchEndpoint::kCompletions, b));
  EXPECT_EQ(j["prompt"], "caf\xef\xbf\xbd");
}

TEST(ServeBenchOpenAi, StreamedChunksOfBothEndpoints) {
  ResponsePart p = parse_response_part(
      R"({"id":"c","object":"text_completion","choices":[{"index":0,"text":" the","finish_reason":null}]})",
      BenchEndpoint::kCompletions);
  EXPECT_EQ(p.text, " the");
  EXPECT_FALSE(p.usage);
  EXPECT_EQ(p.finish_reason, "");
  p = parse_response_part(
      R"({"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]})",
      BenchEndpoint::kChat);
  EXPECT_EQ(p.text, "Hi");
  p = parse_response_part(R"({"choices":[{"index":0,"delta":{"content":null}}]})",
                          BenchEndpoint::kChat);
  EXPECT_EQ(p.text, "");
  // The last chunk of stream_options.include_usage: no choices, the usage.
  p = parse_response_part(
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":128,"total_tokens":140}})",
      BenchEndpoint::kChat);
  ASSERT_TRUE(p.usage);
  EXPECT_EQ(p.usage->prompt_tokens, 12);
  EXPECT_EQ(p.usage->completion_tokens, 128);
  // llama.cpp's last chunk: finish_reason and usage with an empty text.
  p = parse_response_part(
      R"({"choices":[{"text":"","index":0,"finish_reason":"length"}],"usage":{"completion_tokens":3,"prompt_tokens":4}})",
      BenchEndpoint::kCompletions);
  EXPECT_EQ(p.finish_reason, "length");
  EXPECT_EQ(p.usage->completion_tokens, 3);
}

TEST(ServeBenchOpenAi, WholeResponsesAndErrors) {
  ResponsePart p = parse_response_part(
      R"({"choices":[{"index":0,"message":{"role":"assistant","content":"four words of text"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":4}})",
      BenchEndpoint::kChat);
  EXPECT_EQ(p.text, "four words of text");
  EXPECT_EQ(p.finish_reason, "stop");
  EXPECT_EQ(p.usage->prompt_tokens, 9);
  p = parse_response_part(
      R"({"error":{"message":"max_tokens must be at least 1","type":"invalid_request_error","code":400}})",
      BenchEndpoint::kCompletions);
  EXPECT_EQ(p.error, "max_tokens must be at least 1");
  p = parse_response_part(R"({"error":"overloaded"})", BenchEndpoint::kCompletions);
  EXPECT_EQ(p.error, "\"overloaded\"");
  expect_error([] { parse_response_part("{\"choices\":", BenchEndpoint::kChat); },
               {"not a JSON object"});
  expect_error([] { parse_response_part("[1]", BenchEndpoint::kChat); }, {"not a JSON object"});
  expect_error([] { parse_response_part("{\"id\":1}", BenchEndpoint::kChat); }, {"choices"});
}

TEST(ServeBenchOpenAi, ModelList) {
  ModelList m = parse_model_list(
      R"({"object":"list","data":[{"id":"/tmp/gpt2.gguf","object":"model","meta":{"n_vocab":50257}},{"id":"second"}]})");
  EXPECT_EQ(m.ids, (std::vector<std::string>{"/tmp/gpt2.gguf", "second"}));
  EXPECT_EQ(m.vocab_size, 50257);
  m = parse_model_list(R"({"object":"list","data":[{"id":"tessel"}]})");
  EXPECT_EQ(m.ids, std::vector<std::string>{"tessel"});
  EXPECT_FALSE(m.vocab_size);
  expect_error([] { parse_model_list(R"({"models":[]})"); }, {"data"});
}

}  // namespace
}  // namespace tessel::serve
