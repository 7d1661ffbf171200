// SPDX-License-Identifier: Apache-2.0
// Tokenizers to and from GGUF metadata (the tokenizer.ggml.* keys). A GGUF file carries its
// tokenizer inline: "gpt2" is a byte-level BPE (tokens in byte-level spelling plus "a b" merges,
// split first by the regex tokenizer.ggml.pre names: GPT-2's, Llama 3's, Qwen2's, ...), "llama"
// a SentencePiece BPE and "t5" a SentencePiece unigram model (gguf_tokenizer_sentencepiece.cpp).
// All are built with the same classes as the files a model directory has, so a GGUF model
// encodes exactly as its source directory did.
#include "tessel/io/gguf_pretokenizers.h"
#include "tessel/io/gguf_tokenizer_keys.h"

namespace tessel::io {

using namespace detail::gguf_keys;

namespace {

// Special tokens and flags. Where a flag is absent, llama.cpp's default for the model kind: BOS
// first for "llama" and for the pre-tokenizers that say so (Llama 3), EOS last for "t5". Token ids
// come only from the file (llama.cpp's fixed fallbacks for "t5" name T5's own vocabulary).
TokenizerSettings settings_from(const GgufMetadata& m, const std::string& model,
                                const std::vector<std::string>& tokens, bool add_bos_default,
                                const std::string& what) {
  TokenizerSettings s;
  auto name = [&](const char* key) -> std::optional<std::string> {
    if (auto id = token_id(m, key, tokens.size(), what)) return tokens[size_t(*id)];
    return std::nullopt;
  };
  s.source = what;
  s.bos_token = name(kBos);
  s.eos_token = name(kEos);
  s.pad_token = name(kPad);
  s.unk_token = name(kUnk);
  s.add_bos_token = flag(m, kAddBos, add_bos_default, what);
  s.add_eos_token = flag(m, kAddEos, model == "t5", what);
  if (const GgufValue* t = m.find(kChatTemplate))
    s.chat_template = t->as_string(what + ": " + kChatTemplate);
  return s;
}

std::vector<int32_t> token_types(const GgufMetadata& m, size_t n, const std::string& what) {
  return per_token<int32_t>(m, kTypes, n, what, [](const GgufValue& v, const std::string& name) {
    const int64_t t = v.as_int(name);
    TESSEL_CHECK(t >= 1 && t <= 6, name, ": token type ", t,
                 " is not one of 1 (normal) .. 6 (byte)");
    return int32_t(t);
  });
}

// The byte-level BPE's pre-tokenizer: tokenizer.ggml.pre, GPT-2's when absent.
const detail::GgufPretokenizer& pretokenizer_of(const GgufMetadata& m, const std::string& what) {
  const GgufValue* pre = m.find(kPre);
  const std::string name = pre ? pre->as_string(what + ": " + kPre) : "gpt-2";
  const detail::GgufPretokenizer* def = detail::find_gguf_pretokenizer(name);
  TESSEL_CHECK(def != nullptr, what, ": ", kPre, " '", name,
               "' is not supported (supported: ", detail::gguf_pretokenizer_names(), ")");
  return *def;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufMetadata& m, const std::string& what) {
  const std::string model = m.at(kModel, what).as_string(what + ": " + kModel);
  TESSEL_CHECK(model == "gpt2" || model == "llama" || model == "t5", what, ": ", kModel, " '",
               model,
               "' is not supported (gpt2: byte-level BPE, llama: SentencePiece BPE, t5: "
               "SentencePiece unigram)");
  std::vector<std::string> tokens = strings(m, kTokens, what);
  TESSEL_CHECK(!tokens.empty(), what, ": ", kTokens, " is empty");
  const std::vector<int32_t> types = token_types(m, tokens.size(), what);

  if (model != "gpt2") {
    TokenizerSettings settings = settings_from(m, model, tokens, model == "llama", what);
    Tokenizer tok =
        from_sentencepiece_model(sentencepiece_from_gguf(m, model, tokens, types, settings, what));
    tok.settings_ = std::make_shared<const TokenizerSettings>(std::move(settings));
    return tok;
  }

  const detail::GgufPretokenizer& pre = pretokenizer_of(m, what);
  TokenizerSettings settings = settings_from(m, model, tokens, pre.add_bos_default, what);
  TokenizerConfig config;
  config.source = what;
  config.pattern = pre.patterns.front();
  config.then_patterns.assign(pre.patterns.begin() + 1, pre.patterns.end());
  config.ignore_merges = pre.ignore_merges;
  if (const GgufValue* name = m.find(kPre)) config.pretokenizer_name = name->str;
  const std::vector<std::string> merges = strings(m, kMerges, what);
  for (size_t i = 0; i < merges.size(); ++i) {
    const size_t space = merges[i].find(' ');
    TESSEL_CHECK(space != std::string::npos && space > 0 && space + 1 < merges[i].size() &&
                     merges[i].find(' ', space + 1) == std::string::npos,
                 what, ": ", kMerges, "[", i, "] '", merges[i],
                 "' must be two tokens separated by one space");
    config.merges.emplace_back(merges[i].substr(0, space), merges[i].substr(space + 1));
  }
  config.describe_merge = [what](size_t i) {
    return what + " " + kMerges + "[" + std::to_string(i) + "]";
  };
  for (size_t i = 0; i < tokens.size(); ++i) {
    // Control tokens are special (matched in text only when allowed); user-defined ones are
    // matched whole always. Without types, GPT-2's one special token.
    const int32_t type =
        types.empty() ? (tokens[i] == "<|endoftext|>" ? kControl : kNormal) : types[i];
    if (type == kControl || type == kUserDefined)
      config.added_tokens.push_back({int32_t(i), tokens[i], type == kControl});
  }
  config.vocab = std::move(tokens);
  Tokenizer tok(std::move(config));
  tok.settings_ = std::make_shared<const TokenizerSettings>(std::move(settings));
  return tok;
}

void Tokenizer::to_gguf(GgufMetadata& out) const {
  const TokenizerSettings& s = settings();
  if (const SentencePieceModel* sp = sentencepiece_model()) {
    sentencepiece_to_gguf(*sp, out);
    set_id(out, kUnk, s.unk_token ? token_id(*s.unk_token) : std::nullopt);
  } else {
    const std::vector<std::string> patterns = pretokenizer_patterns();
    TESSEL_CHECK(!patterns.empty() && !bpe_merges().empty(),
                 "this tokenizer has no GGUF form (GGUF export takes byte-level BPE models with "
                 "a pre-tokenizer regex, and SentencePiece BPE and unigram models)");
    TESSEL_CHECK(!adds_prefix_space(),
                 "this tokenizer puts a space before the text "
                 "(add_prefix_space), which GGUF's byte-level tokenizers cannot say");
    // The name it was read with when that still describes it, else the first with its regexes.
    const detail::GgufPretokenizer* pre = detail::find_gguf_pretokenizer(pretokenizer_name());
    if (!pre || pre->patterns != patterns || pre->ignore_merges != ignores_merges())
      pre = detail::gguf_pretokenizer_for(patterns, ignores_merges());
    TESSEL_CHECK(
        pre != nullptr, "this tokenizer's pre-tokenizer regex '", patterns.front(), "'",
        patterns.size() > 1 ? " (and " + std::to_string(patterns.size() - 1) + " more)" : "",
        " with ignore_merges = ", ignores_merges(),
        " is none that GGUF names; tessel writes: ", detail::gguf_pretokenizer_names());
    const bool same_name = detail::find_gguf_pretokenizer(pretokenizer_name()) == pre;
    out.set(kModel, GgufValue::of_string("gpt2"));
    out.set(kPre, GgufValue::of_string(same_name ? pretokenizer_name() : pre->name));
    std::vector<std::string> tokens;
    std::vector<GgufValue> types;
    for (int64_t i = 0; i < vocab_size(); ++i) tokens.push_back(token(int32_t(i)));
    out.set(kTokens, GgufValue::of_strings(tokens));
    for (size_t i = 0; i < tokens.size(); ++i) {
      int32_t type = kNormal;
      for (const AddedToken& a : added_tokens())
        if (a.id == int32_t(i)) type = a.special ? kControl : kUserDefined;
      types.push_back(GgufValue::of_int(GgufType::I32, type));
    }
    out.set(kTypes, GgufValue::of_array(GgufType::I32, std::move(types)));
    std::vector<std::string> merges;
    for (const auto& [a, b] : bpe_merges()) merges.push_back(a + " " + b);
    out.set(kMerges, GgufValue::of_strings(merges));
  }
  set_id(out, kBos, bos_token_id());
  set_id(out, kEos, eos_token_id());
  set_id(out, kPad, pad_token_id());
  out.set(kAddBos, GgufValue::of_bool(s.add_bos_token));
  out.set(kAddEos, GgufValue::of_bool(s.add_eos_token));
  if (s.chat_template) out.set(kChatTemplate, GgufValue::of_string(*s.chat_template));
}

}  // namespace tessel::io
