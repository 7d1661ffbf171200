// SPDX-License-Identifier: Apache-2.0
// Where a model's chat template comes from, and rendering it with the variables transformers'
// apply_chat_template passes (messages, add_generation_prompt, bos_token, eos_token).
#include "tessel/serve/chat_template.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/io/gguf.h"
#include "tessel/io/tokenizer.h"
#include "tessel/serve/jinja_eval.h"

namespace tessel::serve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ChatML, the format of Qwen2, many fine-tunes and OpenAI's own chat markup; written for tessel.
constexpr const char* kChatMl =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "chat template: cannot open ", path.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A special token in tokenizer_config.json: "<s>", {"content": "<s>", ...} or null.
std::string token_text(const json& root, const char* key, const std::string& where) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  TESSEL_FAIL(where, ": ", key, " must be a string or an object with a \"content\" string, got ",
              it->dump());
}

// The GGUF token spelled by the id under `key` (tokenizer.ggml.bos_token_id), or "".
std::string gguf_token(const io::GgufMetadata& meta, const char* key, const std::string& path) {
  const io::GgufValue* id = meta.find(key);
  const io::GgufValue* tokens = meta.find("tokenizer.ggml.tokens");
  if (!id || !tokens) return "";
  const int64_t i = id->as_int(path + ": " + key);
  const auto& list = tokens->as_array(path + ": tokenizer.ggml.tokens");
  TESSEL_CHECK(i >= 0 && i < int64_t(list.size()), "chat template: ", path, ": ", key, " = ", i,
               " is not a token id (the vocabulary has ", list.size(), " tokens)");
  return list[size_t(i)].as_string(path + ": tokenizer.ggml.tokens");
}

}  // namespace

ChatTemplate ChatTemplate::from_source(std::string jinja_source, std::string bos, std::string eos) {
  ChatTemplate t;
  t.parsed_ = jinja::parse(jinja_source);
  t.source_ = std::move(jinja_source);
  t.bos_ = std::move(bos);
  t.eos_ = std::move(eos);
  t.origin_ = "given source";
  return t;
}

ChatTemplate ChatTemplate::fallback() {
  ChatTemplate t = from_source(kChatMl, "", "");
  t.fallback_ = true;
  t.origin_ = "built-in ChatML fallback";
  return t;
}

ChatTemplate ChatTemplate::from_settings(const io::TokenizerSettings& settings) {
  const std::string where = settings.source.empty() ? "the tokenizer" : settings.source;
  if (!settings.chat_template) {
    ChatTemplate t = fallback();
    t.origin_ += settings.named_chat_templates.empty()
                     ? " (" + where + " has no chat_template)"
                     : " (" + where + " has named chat templates but none called \"default\")";
    return t;
  }
  try {
    ChatTemplate t = from_source(*settings.chat_template, settings.bos_token.value_or(""),
                                 settings.eos_token.value_or(""));
    t.origin_ = where + " chat_template";
    return t;
  } catch (const Error& e) {
    TESSEL_FAIL(where, ": chat_template: ", e.what());
  }
}

ChatTemplate ChatTemplate::for_model(const std::string& model_path_or_gguf) {
  const std::string& path = model_path_or_gguf;
  if (fs::is_regular_file(path) && io::is_gguf_file(path)) {
    const io::GgufFile file = io::GgufFile::open(path, io::GgufMapping::Windows);
    const io::GgufMetadata& meta = file.metadata();
    io::TokenizerSettings settings;
    settings.source = path;
    if (const io::GgufValue* t = meta.find("tokenizer.chat_template")) {
      settings.chat_template = t->as_string(path + ": tokenizer.chat_template");
    }
    settings.bos_token = gguf_token(meta, "tokenizer.ggml.bos_token_id", path);
    settings.eos_token = gguf_token(meta, "tokenizer.ggml.eos_token_id", path);
    ChatTemplate t = from_settings(settings);
    if (!t.fallback_) t.origin_ = path + " tokenizer.chat_template";
    return t;
  }
  TESSEL_CHECK(fs::is_directory(path), "chat template: ", path,
               " is neither a model directory nor a GGUF file");
  const fs::path config = fs::path(path) / "tokenizer_config.json";
  const fs::path jinja_file = fs::path(path) / "chat_template.jinja";
  io::TokenizerSettings settings;
  settings.source = config.string();
  if (fs::exists(config)) {
    json root;
    try {
      root = json::parse(read_file(config));
    } catch (const json::exception& e) {
      TESSEL_FAIL(config.string(), ": not valid JSON (", e.what(), ")");
    }
    TESSEL_CHECK(root.is_object(), config.string(), ": expected a JSON object at the top level");
    settings.bos_token = token_text(root, "bos_token", config.string());
    settings.eos_token = token_text(root, "eos_token", config.string());
    auto ct = root.find("chat_template");
    if (ct != root.end() && ct->is_string()) {
      settings.chat_template = ct->get<std::string>();
    } else if (ct != root.end() && ct->is_array()) {
      for (const json& entry : *ct) {
        TESSEL_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                         entry.contains("template") && entry["template"].is_string(),
                     config.string(), ": chat_template entries must be {\"name\", \"template\"}");
        settings.named_chat_templates.emplace_back(entry["name"], entry["template"]);
        if (entry["name"] == "default") settings.chat_template = entry["template"];
      }
    } else if (ct != root.end() && !ct->is_null()) {
      TESSEL_FAIL(config.string(), ": chat_template must be a string or a list of templates");
    }
  }
  // transformers writes the template to its own file since 4.43 and prefers that file.
  if (fs::exists(jinja_file)) {
    settings.chat_template = read_file(jinja_file);
    settings.source = jinja_file.string();
  }
  if (!settings.chat_template && !fs::exists(config)) settings.source = path;
  return from_settings(settings);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  jinja::List list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set("role", jinja::Value::of(m.role));
    d.set("content", jinja::Value::of(m.content));
    list.push_back(jinja::Value::of(std::move(d)));
  }
  const std::vector<std::pair<std::string, jinja::Value>> globals = {
      {"messages", jinja::Value::of(std::move(list))},
      {"add_generation_prompt", jinja::Value::of(add_generation_prompt)},
      {"bos_token", jinja::Value::of(bos_)},
      {"eos_token", jinja::Value::of(eos_)},
      // transformers passes these as None when the request has none.
      {"tools", jinja::Value::none()},
      {"documents", jinja::Value::none()},
  };
  return jinja::render(*parsed_, globals);
}

}  // namespace tessel::serve
