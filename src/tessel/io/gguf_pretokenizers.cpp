// SPDX-License-Identifier: Apache-2.0
// The table of GGUF pre-tokenizer names. Regexes are written in PCRE2 syntax exactly as the models'
// tokenizer.json files (Hugging Face) and tiktoken's o200k_base publish them, chains as llama.cpp
// lists them (DeepSeek's Sequence of Splits); llama.cpp's loader decides which names share one
// definition (its aliases below) and the two flags.
#include "tessel/io/gguf_pretokenizers.h"

#include <cstdio>
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

// DeepSeek LLM's letters: the code point ranges its tokenizer.json lists (cased letters).
constexpr std::pair<char32_t, char32_t> kDeepseekLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x376},     {0x377, 0x377},
    {0x37B, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},
    {0x48A, 0x52F},     {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},
    {0x13F8, 0x13FD},   {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},
    {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC},   {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},
    {0x1FF6, 0x1FFC},   {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},
    {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},
    {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},
    {0x213C, 0x213F},   {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2183},
    {0x2184, 0x2184},   {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF2},   {0x2CF3, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},
    {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},   {0xAB70, 0xABBF},
    {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},
    {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943}};

// "\\s?[...]+" over those ranges, in PCRE2's \x{...} notation.
std::string deepseek_words() {
  std::string out = "\\s?[";
  char buffer[32];
  for (const auto& [lo, hi] : kDeepseekLetters) {
    std::snprintf(buffer, sizeof buffer, "\\x{%X}", unsigned(lo));
    out += buffer;
    if (hi != lo) {
      std::snprintf(buffer, sizeof buffer, "-\\x{%X}", unsigned(hi));
      out += buffer;
    }
  }
  return out + "]+";
}

// CJK ideographs (U+4E00..U+9FA5), everything from U+0800 up to them, and Hangul; as DeepSeek's
// files write the class.
constexpr const char* kDeepseekCjk = "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";

std::vector<GgufPretokenizer> make_definitions() {
  const std::string gpt2 = kGpt2Pattern;
  // Canonical entries first: writing picks the first entry with a tokenizer's regexes and flag.
  return {
      {"gpt-2", {gpt2}, false, false},
      {"llama-bpe", {std::string(kLlama3)}, true, true},
      {"dbrx", {std::string(kLlama3)}, false, false},
      {"qwen2", {std::string(kQwen2)}, false, false},
      {"qwen35", {std::string(kQwen35)}, false, false},
      {"gpt-4o", {std::string(kGpt4o)}, false, false},
      {"tekken", {std::string(kTekken)}, true, true},
      // StarCoder: every digit alone (Hugging Face's Digits), then GPT-2's regex.
      {"starcoder", {"\\p{N}", gpt2}, false, false},
      {"deepseek-coder",
       {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kDeepseekCjk, "\\p{N}"},
       false,
       false},
      {"deepseek-llm",
       {"[\\r\\n]", deepseek_words(),
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
        "\\s+$", kDeepseekCjk, "\\p{N}+"},
       false,
       false},
      {"deepseek-v3",
       {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
        "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+"
        "|\\s+(?!\\S)|\\s+"},
       false,
       false},
  };
}

// Other names llama.cpp gives the same definitions.
constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
    {"default", "gpt-2"},        {"phi-2", "gpt-2"},         {"jina-es", "gpt-2"},
    {"jina-de", "gpt-2"},        {"gigachat", "gpt-2"},      {"jina-v2-es", "gpt-2"},
    {"jina-v2-de", "gpt-2"},     {"mpt", "gpt-2"},           {"olmo", "gpt-2"},
    {"jais", "gpt-2"},           {"exaone4", "gpt-2"},       {"trillion", "gpt-2"},
    {"llama3", "llama-bpe"},     {"llama-v3", "llama-bpe"},  {"falcon3", "llama-bpe"},
    {"falcon-h1", "llama-bpe"},  {"pixtral", "llama-bpe"},   {"midm-2.0", "llama-bpe"},
    {"lfm2", "llama-bpe"},       {"smaug-bpe", "dbrx"},      {"deepseek-r1-qwen", "qwen2"},
    {"megrez", "qwen2"},         {"stablelm2", "qwen2"},     {"llama4", "gpt-4o"},
    {"kanana2", "gpt-4o"},       {"refact", "starcoder"},    {"command-r", "starcoder"},
    {"smollm", "starcoder"},     {"codeshell", "starcoder"}, {"exaone", "starcoder"},
    {"minerva-7b", "starcoder"},
};

const std::vector<GgufPretokenizer>& definitions() {
  static const std::vector<GgufPretokenizer> table = make_definitions();
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

const GgufPretokenizer* gguf_pretokenizer_for(const std::vector<std::string>& patterns,
                                              bool ignore_merges) {
  for (const GgufPretokenizer& d : definitions())
    if (d.patterns == patterns && d.ignore_merges == ignore_merges) return &d;
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
