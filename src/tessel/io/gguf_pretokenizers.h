// SPDX-License-Identifier: Apache-2.0
// Internal to io: the byte-level BPE pre-tokenizers a GGUF file names in tokenizer.ggml.pre, as
// llama.cpp's loader interprets those names (which regex, whether a piece that is already a token
// skips the merges, whether BOS is added when the file does not say). The regexes are the ones the
// models' published tokenizer.json files hold, so a GGUF model splits text as its source did.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessel::io::detail {

struct GgufPretokenizer {
  std::string name;  // the name written back (the first of its aliases)
  // PCRE2 syntax, as in the model's tokenizer.json; each after the first splits every piece of
  // the one before (a Sequence of Splits there, a list of regexes in llama.cpp).
  std::vector<std::string> patterns;
  bool ignore_merges = false;    // Hugging Face BPE's ignore_merges
  bool add_bos_default = false;  // add_bos_token when tokenizer.ggml.add_bos_token is absent
};

// The definition of a tokenizer.ggml.pre name (aliases included); null when tessel has none.
const GgufPretokenizer* find_gguf_pretokenizer(std::string_view name);

// The definition whose regexes and merge rule a byte-level BPE has, for writing it; null if none.
const GgufPretokenizer* gguf_pretokenizer_for(const std::vector<std::string>& patterns,
                                              bool ignore_merges);

// The names tessel reads, for error messages ("gpt-2, llama-bpe, ...").
std::string gguf_pretokenizer_names();

}  // namespace tessel::io::detail
