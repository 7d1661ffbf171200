// SPDX-License-Identifier: Apache-2.0
// The table of GGUF pre-tokenizer names. Regexes are written in PCRE2 syntax exactly as the models'
// tokenizer.json files (Hugging Face) and tiktoken's o200k_base publish them; llama.cpp's loader
// decides which names share one (its aliases below) and the two flags.
#include "tessel/io/gguf_pretokenizers.h"

#include <array>
#include <utility>

#include "tessel/io/pretokenize.h"

namespace tessel::io::detail {
namespace {

// Contractions in either case; PCRE2, like the Rust and JavaScript engines Hugging Face uses,
// folds case by Unicode rules here.
#define TESSEL_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
// Letters of an upper-case or title-case run, then of a lower-case run (o200k_base, Tekken).
#define TESSEL_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define TESSEL_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"

// Llama 3 (and cl100k_base): digits in runs of at most three, a letter run takes one leading
// non-letter, newlines end punctuation runs.
constexpr std::string_view kLlama3 = TESSEL_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)|\\s+";
// Qwen2: Llama 3's with single digits.
constexpr std::string_view kQwen2 = TESSEL_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)|\\s+";
// Qwen3.5: Qwen2's with combining marks counted as letters.
constexpr std::string_view kQwen35 = TESSEL_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// o200k_base (GPT-4o, Llama 4): words split at case changes, contractions attached to the word.
constexpr std::string_view kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?" TESSEL_UPPER "*" TESSEL_LOWER "+" TESSEL_CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?" TESSEL_UPPER "+" TESSEL_LOWER "*" TESSEL_CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Tekken (Mistral NeMo, Pixtral 12B): o200k_base's without contractions, single digits.
constexpr std::string_view kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?" TESSEL_UPPER "*" TESSEL_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" TESSEL_UPPER
    "+" TESSEL_LOWER "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

#undef TESSEL_CONTRACTIONS
#undef TESSEL_UPPER
#undef TESSEL_LOWER

// Canonical entries first: writing picks the first entry with a tokenizer's regex and flag.
const std::array<GgufPretokenizer, 7> kDefinitions = {{
    {"gpt-2", {}, false, false},  // pattern filled from kGpt2Pattern below
    {"llama-bpe", kLlama3, true, true},
    {"dbrx", kLlama3, false, false},
    {"qwen2", kQwen2, false, false},
    {"qwen35", kQwen35, false, false},
    {"gpt-4o", kGpt4o, false, false},
    {"tekken", kTekken, true, true},
}};

// Other names llama.cpp gives the same definitions.
constexpr std::array<std::pair<std::string_view, std::string_view>, 25> kAliases = {{
    {"default", "gpt-2"},
    {"phi-2", "gpt-2"},
    {"jina-es", "gpt-2"},
    {"jina-de", "gpt-2"},
    {"gigachat", "gpt-2"},
    {"jina-v2-es", "gpt-2"},
    {"jina-v2-de", "gpt-2"},
    {"mpt", "gpt-2"},
    {"olmo", "gpt-2"},
    {"jais", "gpt-2"},
    {"llama3", "llama-bpe"},
    {"llama-v3", "llama-bpe"},
    {"falcon3", "llama-bpe"},
    {"falcon-h1", "llama-bpe"},
    {"pixtral", "llama-bpe"},
    {"smaug-bpe", "dbrx"},
    {"deepseek-r1-qwen", "qwen2"},
    {"megrez", "qwen2"},
    {"stablelm2", "qwen2"},
    {"llama4", "gpt-4o"},
    {"exaone4", "gpt-2"},
    {"trillion", "gpt-2"},
    {"midm-2.0", "llama-bpe"},
    {"lfm2", "llama-bpe"},
    {"kanana2", "gpt-4o"},
}};

const std::array<GgufPretokenizer, 7>& definitions() {
  static const std::array<GgufPretokenizer, 7> table = [] {
    auto t = kDefinitions;
    t[0].pattern = kGpt2Pattern;
    return t;
  }();
  return table;
}

}  // namespace

const GgufPretokenizer* find_gguf_pretokenizer(std::string_view name) {
  for (const auto& [alias, canonical] : kAliases)
    if (alias == name) name = canonical;
  for (const GgufPretokenizer& d : definitions())
    if (d.name == name) return &d;
  return nullptr;
}

const GgufPretokenizer* gguf_pretokenizer_for(std::string_view pattern, bool ignore_merges) {
  for (const GgufPretokenizer& d : definitions())
    if (d.pattern == pattern && d.ignore_merges == ignore_merges) return &d;
  return nullptr;
}

std::string gguf_pretokenizer_names() {
  std::string out;
  for (const GgufPretokenizer& d : definitions())
    out += (out.empty() ? "" : ", ") + std::string(d.name);
  for (const auto& [alias, canonical] : kAliases) out += ", " + std::string(alias);
  return out;
}

}  // namespace tessel::io::detail
