// SPDX-License-Identifier: Apache-2.0
// Internal to io: reading Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json)
// with nlohmann::json. Every helper names the file and the entry in its errors.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessel/io/tokenizer.h"
#include "tessel/io/tokenizer_model.h"

namespace tessel::io::detail {

using nlohmann::json;

std::string read_text(const std::string& path);
// Parses JSON, rejecting an object that repeats a key; errors name `path`.
json parse_json(const std::string& text, const std::string& path);
// object[key], or null when absent or JSON null.
const json* member(const json& object, const char* key);
bool flag(const json& object, const char* key, bool fallback, const std::string& where);
// object["type"], which must be a string.
std::string type_of(const json& object, const std::string& where);
// A token -> id object as a vector indexed by id; ids must be exactly 0..size-1.
std::vector<std::string> vocab_from_json(const json& object, const std::string& where);
// A model's "merges": pairs written "a b" (one space; neither side holds a plain space) or
// ["a", "b"].
std::vector<std::pair<std::string, std::string>> merges_from_json(const json& list,
                                                                  const std::string& where);
void read_added_tokens(const json& list, const std::string& where, std::vector<AddedToken>& out);
// Settings implied by a post_processor: a TemplateProcessing whose single-sequence template
// starts (ends) with a special token adds a BOS (EOS).
void settings_from_post_processor(const json* post, const std::string& where,
                                  TokenizerSettings& settings);
// A tokenizer_config.json read into `settings` (fields it lacks keep their values).
void read_tokenizer_config(const std::string& path, TokenizerSettings& settings);

// A SentencePiece-style tokenizer.json (BPE without a byte-level pre-tokenizer, or Unigram).
struct SentencePieceJson {
  std::vector<std::string> spelling;  // by id: model vocabulary, then added tokens beyond it
  std::vector<AddedToken> added;
  std::shared_ptr<const TokenModel> model;
  TokenizerSettings settings;
};
SentencePieceJson read_sentencepiece_json(const json& root, const std::string& path);

}  // namespace tessel::io::detail
