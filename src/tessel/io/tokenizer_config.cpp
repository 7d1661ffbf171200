// SPDX-License-Identifier: Apache-2.0
// tokenizer_config.json (Hugging Face transformers): special token names (a string or an
// AddedToken object {"content": ...}), add_bos_token / add_eos_token, chat_template (a string, or
// a list of {"name", "template"}), model_max_length. And the BOS/EOS a tokenizer.json's
// post_processor implies when there is no such file.
#include <cmath>

#include "tessel/core/error.h"
#include "tessel/io/tokenizer_json.h"

namespace tessel::io::detail {
namespace {

// A special token entry: "<s>", {"content": "<s>", ...}, or null (none).
std::optional<std::string> token_name(const json& value, const std::string& where) {
  if (value.is_null()) return std::nullopt;
  if (value.is_string()) return value.get<std::string>();
  TESSEL_CHECK(value.is_object(), where, " must be a string, an AddedToken object or null, got ",
               value.dump());
  const json* content = member(value, "content");
  TESSEL_CHECK(content && content->is_string(), where, " has no \"content\" string");
  return content->get<std::string>();
}

// The special token a template item names ({"SpecialToken": {"id": "<s>", ...}}), if it is one.
std::optional<std::string> special_item(const json& item) {
  if (!item.is_object()) return std::nullopt;
  const json* special = member(item, "SpecialToken");
  if (!special || !special->is_object()) return std::nullopt;
  const json* id = member(*special, "id");
  if (!id || !id->is_string()) return std::nullopt;
  return id->get<std::string>();
}

}  // namespace

void settings_from_post_processor(const json* post, const std::string& where,
                                  TokenizerSettings& settings) {
  if (!post) return;
  const std::string type = type_of(*post, where);
  if (type == "Sequence") {
    const json* list = member(*post, "processors");
    TESSEL_CHECK(list && list->is_array(), where, ".processors must be an array");
    for (size_t i = 0; i < list->size(); ++i) {
      settings_from_post_processor(&(*list)[i], where + ".processors[" + std::to_string(i) + "]",
                                   settings);
    }
    return;
  }
  TESSEL_CHECK(type == "ByteLevel" || type == "TemplateProcessing", where, " '", type,
               "' is not supported (supported: ByteLevel, TemplateProcessing, Sequence of them)");
  if (type != "TemplateProcessing") return;
  const json* single = member(*post, "single");
  TESSEL_CHECK(single && single->is_array(), where, ".single must be an array");
  if (single->empty()) return;
  if (const auto first = special_item(single->front())) {
    settings.bos_token = *first;
    settings.add_bos_token = true;
  }
  if (const auto last = special_item(single->back()); last && single->size() > 1) {
    settings.eos_token = *last;
    settings.add_eos_token = true;
  }
}

void read_tokenizer_config(const std::string& path, TokenizerSettings& settings) {
  const json root = parse_json(read_text(path), path);
  const std::string where = "tokenizer: " + path + ": ";
  TESSEL_CHECK(root.is_object(), where, "expected a JSON object at the top level");
  settings.source = path;
  const std::pair<const char*, std::optional<std::string>*> names[] = {
      {"bos_token", &settings.bos_token},
      {"eos_token", &settings.eos_token},
      {"pad_token", &settings.pad_token},
      {"unk_token", &settings.unk_token}};
  for (const auto& [key, slot] : names) {
    if (root.contains(key)) *slot = token_name(root[key], where + key);
  }
  settings.add_bos_token = flag(root, "add_bos_token", settings.add_bos_token, where);
  settings.add_eos_token = flag(root, "add_eos_token", settings.add_eos_token, where);
  if (const json* t = member(root, "chat_template")) {
    if (t->is_string()) {
      settings.chat_template = t->get<std::string>();
    } else {
      TESSEL_CHECK(t->is_array(), where, "chat_template must be a string or a list of templates");
      settings.named_chat_templates.clear();
      for (size_t i = 0; i < t->size(); ++i) {
        const json& e = (*t)[i];
        const std::string entry = where + "chat_template[" + std::to_string(i) + "]";
        TESSEL_CHECK(e.is_object(), entry, " must be {\"name\", \"template\"}");
        const json* name = member(e, "name");
        const json* text = member(e, "template");
        TESSEL_CHECK(name && name->is_string() && text && text->is_string(), entry,
                     " must have string \"name\" and \"template\"");
        settings.named_chat_templates.emplace_back(*name, *text);
        if (*name == "default") settings.chat_template = text->get<std::string>();
      }
    }
  }
  if (const json* n = member(root, "model_max_length")) {
    TESSEL_CHECK(n->is_number(), where, "model_max_length must be a number, got ", n->dump());
    const double v = n->get<double>();
    TESSEL_CHECK(v >= 0 && std::isfinite(v), where, "model_max_length ", n->dump(),
                 " is not a length");
    // transformers writes 1e30 (VERY_LARGE_INTEGER) for "no limit".
    if (v < 9.0e18) {
      settings.model_max_length = int64_t(v);
    } else {
      settings.model_max_length.reset();
    }
  }
}

}  // namespace tessel::io::detail
