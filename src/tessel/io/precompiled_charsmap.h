// SPDX-License-Identifier: Apache-2.0
// SentencePiece's precompiled character map (NormalizerSpec.precompiled_charsmap), the compiled
// form of a normalization rule such as nmt_nfkc: a darts-clone double-array trie over UTF-8 byte
// strings whose leaf values are offsets of NUL-terminated replacement strings. Layout
// (sentencepiece normalizer.cc): <trie size in bytes, uint32 LE><trie units, uint32 LE each>
// <replacement strings>. Every lookup is bounds-checked: a corrupt map can fail, never overrun.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessel::io {

class PrecompiledCharsMap {
 public:
  // Parses the blob; `where` names it in errors. An empty blob means "no rule".
  PrecompiledCharsMap(std::string_view blob, const std::string& where);

  bool empty() const { return units_.empty(); }

  // The longest rule whose source is a prefix of `text`: its byte length and replacement, or
  // {0, ""} when none matches (darts-clone's commonPrefixSearch, keeping the longest result).
  std::pair<size_t, std::string_view> longest_prefix(std::string_view text) const;

 private:
  std::vector<uint32_t> units_;
  std::string normalized_;
  std::string where_;
};

}  // namespace tessel::io
