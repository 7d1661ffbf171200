// SPDX-License-Identifier: Apache-2.0
// Chat templates: templates written for these tests from the published prompt formats of Llama 2
// chat, Llama 3 / 3.1 instruct, Mistral instruct, Qwen2 (ChatML), Zephyr, Gemma and Phi-3,
// rendered on many conversations by tessel and by Python's jinja2 (byte-equal, errors included);
// the formats themselves on a few; where a model's template is found; the fallback.
#include "tessel/serve/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/per_test_dir.h"
#include "jinja_reference.h"
#include "tessel/core/error.h"
#include "tessel/io/gguf.h"
#include "tessel/io/tokenizer.h"

namespace tessel::serve {
namespace {

namespace fs = std::filesystem;
using test::ojson;

struct Format {
  std::string name, bos, eos;
};
const std::vector<Format> kFormats = {
    {"llama2", "<s>", "</s>"},
    {"llama3", "<|begin_of_text|>", "<|eot_id|>"},
    {"llama31", "<|begin_of_text|>", "<|eot_id|>"},
    {"mistral", "<s>", "</s>"},
    {"qwen2", "", "<|im_end|>"},
    {"zephyr", "<s>", "</s>"},
    {"gemma", "<bos>", "<eos>"},
    {"phi3", "<s>", "<|endoftext|>"},
};

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string template_source(const std::string& name) {
  return read(fs::path(TESSEL_SOURCE_DIR) / "tests/serve/chat_templates" / (name + ".jinja"));
}

using Conversation = std::vector<ChatMessage>;

std::vector<Conversation> conversations() {
  return {
      {{"user", "Hello!"}},
      {{"system", "You are terse."}, {"user", "What is 2+2?"}},
      {{"system", "  Be kind.  "},
       {"user", "Hi"},
       {"assistant", "Hello, how can I help?"},
       {"user", "Tell me a joke."}},
      {{"user", "first"}, {"assistant", "reply"}},
      {{"user", "one"}, {"user", "two"}},  // not alternating
      {{"user", "q"}, {"assistant", "a"}, {"assistant", "b"}},
      {{"system", "s"}},
      {},  // empty
      {{"user", "héllo 世界 🙂 — ✓ naïve"}, {"assistant", "ünïcödé ответ"}},
      {{"user", "{{ not a tag }} {% nope %} {# x #} 'single' \"double\" \\ back\\slash"}},
      {{"user", "  padded \n\n"}, {"assistant", "\ttabbed\t"}, {"user", ""}},
      {{"tool", "result"}, {"user", "next"}},  // a role some templates refuse
      {{"system", "sys"}, {"system", "second system"}, {"user", "u"}},
  };
}

ojson messages_json(const Conversation& c) {
  ojson list = ojson::array();
  for (const auto& m : c) list.push_back({{"role", m.role}, {"content", m.content}});
  return list;
}

TEST(ChatTemplate, MatchesPythonJinja2OnEveryFormat) {
  std::vector<test::ReferenceCase> cases;
  struct Run {
    const Format* format;
    ChatTemplate tmpl;
    Conversation conversation;
    bool add_generation_prompt;
  };
  std::vector<Run> runs;
  for (const Format& f : kFormats) {
    const ChatTemplate tmpl = ChatTemplate::from_source(template_source(f.name), f.bos, f.eos);
    for (const Conversation& c : conversations()) {
      for (bool agp : {false, true}) {
        cases.push_back({tmpl.source(),
                         {{"messages", messages_json(c)},
                          {"add_generation_prompt", agp},
                          {"bos_token", f.bos},
                          {"eos_token", f.eos},
                          {"tools", nullptr},
                          {"documents", nullptr}}});
        runs.push_back({&f, tmpl, c, agp});
      }
    }
  }
  const ChatTemplate fallback = ChatTemplate::fallback();
  for (const Conversation& c : conversations()) {
    cases.push_back({fallback.source(),
                     {{"messages", messages_json(c)},
                      {"add_generation_prompt", true},
                      {"bos_token", ""},
                      {"eos_token", ""}}});
    runs.push_back({nullptr, fallback, c, true});
  }
  const auto want = test::jinja2_render(cases);
  ASSERT_EQ(want.size(), runs.size());
  int rejected = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    const std::string what = (r.format ? r.format->name : std::string("fallback")) + " case " +
                             std::to_string(i) + (r.add_generation_prompt ? " (+prompt)" : "");
    try {
      const std::string got = r.tmpl.render(r.conversation, r.add_generation_prompt);
      ASSERT_TRUE(want[i].ok) << what << ": tessel rendered '" << got << "' where jinja2 raised "
                              << want[i].error;
      EXPECT_EQ(got, want[i].text) << what;
    } catch (const Error& e) {
      EXPECT_FALSE(want[i].ok) << what << ": tessel raised '" << e.what()
                               << "' where jinja2 rendered '" << want[i].text << "'";
      EXPECT_NE(std::string(e.what()).find("chat template line "), std::string::npos) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 10);  // the non-alternating and system-only conversations, at least
}

// The published formats, written out by hand for a few conversations.
TEST(ChatTemplate, ReproducesThePublishedFormats) {
  const Conversation chat = {{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}};
  const auto render = [&](const char* name, const char* bos, const char* eos, bool agp) {
    return ChatTemplate::from_source(template_source(name), bos, eos).render(chat, agp);
  };
  EXPECT_EQ(render("llama2", "<s>", "</s>", true),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]");
  EXPECT_EQ(render("llama3", "<|begin_of_text|>", "<|eot_id|>", true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render("mistral", "<s>", "</s>", true),
            "<s>[INST] S\n\nU1 [/INST]A1</s>[INST] U2 [/INST]");
  EXPECT_EQ(render("qwen2", "", "<|im_end|>", true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
            "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(
      ChatTemplate::from_source(template_source("qwen2"), "", "").render({{"user", "hi"}}, true),
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render("zephyr", "<s>", "</s>", true),
            "<|system|>\nS</s>\n<|user|>\nU1</s>\n<|assistant|>\nA1</s>\n<|user|>\nU2</s>\n"
            "<|assistant|>\n");
  EXPECT_EQ(ChatTemplate::from_source(template_source("gemma"), "<bos>", "<eos>")
                .render({{"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}}, true),
            "<bos><start_of_turn>user\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
            "<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render("phi3", "<s>", "<|endoftext|>", true),
            "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n<|user|>\nU2"
            "<|end|>\n<|assistant|>\n");
  EXPECT_EQ(ChatTemplate::fallback().render(chat, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
            "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n");
}

TEST(ChatTemplate, RejectionsNameTheTemplateLine) {
  const ChatTemplate t = ChatTemplate::from_source(template_source("llama2"), "<s>", "</s>");
  try {
    t.render({{"user", "a"}, {"user", "b"}}, true);
    FAIL() << "a non-alternating conversation was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("chat template line 10"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Conversation roles must alternate"), std::string::npos) << msg;
  }
  try {
    ChatTemplate::from_source("ok\n{% for m in messages %}\n{{ m.role ", "", "");
    FAIL() << "an unclosed tag parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

class ModelDir : public ::tessel::test::PerTestDir {
 protected:
  ModelDir() : PerTestDir("tessel_chat_template") {}
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
};

TEST_F(ModelDir, TokenizerConfigTemplateWithTokenObjects) {
  const std::string source = template_source("llama2");
  write("tokenizer_config.json", ojson({{"chat_template", source},
                                        {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                                        {"eos_token", "</s>"}})
                                     .dump());
  const ChatTemplate t = ChatTemplate::for_model(dir_.string());
  EXPECT_FALSE(t.is_fallback());
  EXPECT_EQ(t.source(), source);
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.eos_token(), "</s>");
  EXPECT_EQ(t.render({{"user", "x"}}, true), "<s>[INST] x [/INST]");
}

TEST_F(ModelDir, NamedTemplatesUseDefault) {
  write("tokenizer_config.json", ojson({{"chat_template",
                                         {{{"name", "tool_use"}, {"template", "T"}},
                                          {{"name", "default"}, {"template", "D{{ bos_token }}"}}}},
                                        {"bos_token", "<b>"}})
                                     .dump());
  const ChatTemplate t = ChatTemplate::for_model(dir_.string());
  EXPECT_EQ(t.render({}, false), "D<b>");
  write("tokenizer_config.json",
        ojson({{"chat_template", {{{"name", "tool_use"}, {"template", "T"}}}}}).dump());
  const ChatTemplate f = ChatTemplate::for_model(dir_.string());
  EXPECT_TRUE(f.is_fallback());
  EXPECT_NE(f.origin().find("default"), std::string::npos) << f.origin();
}

TEST_F(ModelDir, ChatTemplateFileWins) {
  write("tokenizer_config.json", ojson({{"chat_template", "old"}}).dump());
  write("chat_template.jinja", "new {{ messages|length }}\n");
  EXPECT_EQ(ChatTemplate::for_model(dir_.string()).render({{"user", "u"}}, false), "new 1");
}

TEST_F(ModelDir, NoTemplateMeansFallback) {
  write("tokenizer_config.json", ojson({{"bos_token", "<s>"}}).dump());
  const ChatTemplate t = ChatTemplate::for_model(dir_.string());
  EXPECT_TRUE(t.is_fallback());
  EXPECT_NE(t.origin().find("ChatML"), std::string::npos);
  EXPECT_EQ(t.render({{"user", "u"}}, true),
            "<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n");
  fs::remove(dir_ / "tokenizer_config.json");
  EXPECT_TRUE(ChatTemplate::for_model(dir_.string()).is_fallback());
}

TEST_F(ModelDir, BadInputIsOneClearError) {
  write("tokenizer_config.json", ojson({{"chat_template", "a\n{% if x %}"}}).dump());
  try {
    ChatTemplate::for_model(dir_.string());
    FAIL() << "a broken template was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tokenizer_config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  }
  write("tokenizer_config.json", "{not json");
  EXPECT_THROW(ChatTemplate::for_model(dir_.string()), Error);
  write("tokenizer_config.json", ojson({{"chat_template", 5}}).dump());
  EXPECT_THROW(ChatTemplate::for_model(dir_.string()), Error);
  EXPECT_THROW(ChatTemplate::for_model((dir_ / "missing").string()), Error);
}

TEST_F(ModelDir, GgufMetadata) {
  io::GgufMetadata meta;
  meta.set("general.architecture", io::GgufValue::of_string("llama"));
  meta.set("tokenizer.ggml.tokens", io::GgufValue::of_strings({"<unk>", "<s>", "</s>", "a"}));
  meta.set("tokenizer.ggml.bos_token_id", io::GgufValue::of_u32(1));
  meta.set("tokenizer.ggml.eos_token_id", io::GgufValue::of_u32(2));
  meta.set("tokenizer.chat_template", io::GgufValue::of_string(template_source("mistral")));
  const std::string path = (dir_ / "model.gguf").string();
  io::save_gguf(path, meta, {});
  const ChatTemplate t = ChatTemplate::for_model(path);
  EXPECT_FALSE(t.is_fallback());
  EXPECT_EQ(t.render({{"user", "hi"}, {"assistant", "yo"}}, false), "<s>[INST] hi [/INST]yo</s>");
  meta.set("tokenizer.chat_template", io::GgufValue::of_u32(3));
  io::save_gguf(path, meta, {});
  EXPECT_THROW(ChatTemplate::for_model(path), Error);
}

TEST(ChatTemplate, FromTokenizerSettings) {
  io::TokenizerSettings settings;
  settings.source = "tok/tokenizer_config.json";
  EXPECT_TRUE(ChatTemplate::from_settings(settings).is_fallback());
  settings.chat_template = "{{ eos_token }}";
  settings.eos_token = "</s>";
  const ChatTemplate t = ChatTemplate::from_settings(settings);
  EXPECT_FALSE(t.is_fallback());
  EXPECT_EQ(t.render({}, false), "</s>");
}

}  // namespace
}  // namespace tessel::serve
