// SPDX-License-Identifier: Apache-2.0
// Chat templates: turn an OpenAI-style list of messages into the prompt text a chat model was
// trained on. Hugging Face models ship the format as a Jinja2 template (tokenizer_config.json's
// "chat_template", or GGUF's tokenizer.chat_template); it is rendered here by tessel's own
// interpreter of the Jinja2 subset those templates use (serve/jinja_*.h), with the environment
// transformers renders them in: trim_blocks, lstrip_blocks, raise_exception(), loop controls and
// a tojson that keeps non-ASCII text. A model without a template gets the built-in ChatML
// fallback (docs/SERVING.md, "Chat templates").
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tessel::io {
struct TokenizerSettings;
}

namespace tessel::serve {

namespace jinja {
struct Template;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ... (passed through as the template sees it)
  std::string content;  // UTF-8 text
};

class ChatTemplate {
 public:
  // From a model directory (tokenizer_config.json's "chat_template": a string, or a list of
  // {"name", "template"} of which "default" is used; bos_token / eos_token as a string or an
  // AddedToken object) or a GGUF file (tokenizer.chat_template, with the BOS/EOS spelled by
  // tokenizer.ggml.bos_token_id / eos_token_id); the built-in fallback when neither names a
  // template. A template that does not parse is an Error naming the file and the line.
  static ChatTemplate for_model(const std::string& model_path_or_gguf);
  // From a tokenizer that is already loaded (its settings carry the same fields).
  static ChatTemplate from_settings(const io::TokenizerSettings& settings);
  // Parses `jinja_source` now, so a syntax error is reported here (tessel::Error with the line).
  static ChatTemplate from_source(std::string jinja_source, std::string bos, std::string eos);
  // ChatML (<|im_start|>role\ncontent<|im_end|>\n ...), bos and eos empty.
  static ChatTemplate fallback();

  // The prompt for `messages`; with add_generation_prompt the text that opens the assistant's
  // turn is appended. An Error (with the template line) when the template rejects the
  // conversation via raise_exception or fails while rendering; a front end answers it with 400.
  // Const and self-contained: several threads may render with one ChatTemplate at once.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  bool is_fallback() const { return fallback_; }
  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  // Where the template came from: a file path and key, or "built-in ChatML fallback (...why)".
  const std::string& origin() const { return origin_; }

 private:
  ChatTemplate() = default;

  std::string source_, bos_, eos_, origin_;
  bool fallback_ = false;
  std::shared_ptr<const jinja::Template> parsed_;
};

}  // namespace tessel::serve
