// SPDX-License-Identifier: Apache-2.0
// Internal to io: the algorithm behind an io::Tokenizer that is not GPT-2's byte-level BPE
// (SentencePiece .model files, SentencePiece-style tokenizer.json), plus the small helpers those
// share: a byte trie for prefix search and the decode stream interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessel::io::detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
// A string-keyed map that can be searched with a string_view.
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// Decodes ids one at a time. push() appends only complete text (never part of a UTF-8 character
// or of a byte-fallback run that later tokens could still change); finish() appends the rest.
// Pushing every id and then finishing gives exactly the whole-sequence decode.
class DecodeStream {
 public:
  virtual ~DecodeStream() = default;
  virtual void push(int32_t id, std::string& out) = 0;
  virtual void finish(std::string& out) = 0;
};

// One tokenization algorithm with its vocabulary. Ids are checked by io::Tokenizer before they
// reach decode streams.
class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Encodes a segment that holds no added token; `at_start` tells whether it begins the input
  // (Hugging Face's Metaspace "first" prepend scheme).
  virtual void encode(std::string_view text, bool at_start, std::vector<int32_t>& out) const = 0;
  // raw: byte-fallback runs are emitted as their bytes, unrepaired (decode_bytes).
  virtual std::unique_ptr<DecodeStream> decoder(bool raw) const = 0;
};

// A trie over byte strings mapping each inserted string to a value, for "every vocabulary entry
// that is a prefix of the text here" (the unigram lattice).
class PrefixTrie {
 public:
  void insert(std::string_view key, int32_t value) {
    uint32_t node = 0;
    for (const char c : key) {
      const uint64_t k = (uint64_t(node) << 8) | uint8_t(c);
      auto it = children_.find(k);
      if (it == children_.end()) {
        it = children_.emplace(k, uint32_t(values_.size())).first;
        values_.push_back(-1);
      }
      node = it->second;
    }
    values_[node] = value;
  }
  // Calls fn(length, value) for each key that is a prefix of text, shortest first.
  template <typename Fn>
  void prefixes(std::string_view text, Fn&& fn) const {
    uint32_t node = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto it = children_.find((uint64_t(node) << 8) | uint8_t(text[i]));
      if (it == children_.end()) return;
      node = it->second;
      if (values_[node] >= 0) fn(i + 1, values_[node]);
    }
  }

 private:
  std::unordered_map<uint64_t, uint32_t> children_;
  std::vector<int32_t> values_{-1};  // node 0 is the root
};

// "<0x41>" -> 0x41 for the 256 byte pieces (two upper- or lower-case hex digits); else -1.
inline int byte_piece_value(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// "<0x41>" for byte 0x41, as SentencePiece and Hugging Face spell byte pieces.
inline std::string byte_piece(uint8_t b) {
  static const char* digits = "0123456789ABCDEF";
  return std::string{'<', '0', 'x', digits[b >> 4], digits[b & 15], '>'};
}

// Length of the UTF-8 character that starts with byte c, by its top four bits, as SentencePiece's
// OneCharLen (a stray continuation byte counts as 1).
inline size_t one_char_len(char c) {
  return "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[(uint8_t(c)) >> 4];
}

// "\xE2\x96\x81", U+2581 LOWER ONE EIGHTH BLOCK: how SentencePiece spells a space.
inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";

}  // namespace tessel::io::detail
