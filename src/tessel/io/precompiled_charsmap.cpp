// SPDX-License-Identifier: Apache-2.0
// The double-array lookup of darts-clone (DoubleArrayUnit: has_leaf = bit 8, value = low 31 bits,
// label = low 8 bits and bit 31, offset = (unit >> 10) << ((unit & 512) >> 6)), with bounds checks.
#include "tessel/io/precompiled_charsmap.h"

#include "tessel/core/error.h"

namespace tessel::io {
namespace {

bool has_leaf(uint32_t u) {
  return ((u >> 8) & 1) == 1;
}
uint32_t value(uint32_t u) {
  return u & ((1u << 31) - 1);
}
uint32_t label(uint32_t u) {
  return u & ((1u << 31) | 0xFF);
}
uint32_t offset(uint32_t u) {
  return (u >> 10) << ((u & (1u << 9)) >> 6);
}

}  // namespace

PrecompiledCharsMap::PrecompiledCharsMap(std::string_view blob, const std::string& where)
    : where_(where) {
  if (blob.empty()) return;
  TESSEL_CHECK(blob.size() > 4, where, ": precompiled_charsmap has ", blob.size(),
               " bytes, too short for its header");
  uint32_t trie_bytes = 0;
  for (int i = 0; i < 4; ++i) trie_bytes |= uint32_t(uint8_t(blob[i])) << (8 * i);
  TESSEL_CHECK(trie_bytes % 4 == 0 && trie_bytes >= 4 && trie_bytes <= blob.size() - 4, where,
               ": precompiled_charsmap declares a trie of ", trie_bytes, " bytes in a blob of ",
               blob.size(), " (corrupt)");
  units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    uint32_t u = 0;
    for (int b = 0; b < 4; ++b) u |= uint32_t(uint8_t(blob[4 + 4 * i + b])) << (8 * b);
    units_[i] = u;
  }
  normalized_ = std::string(blob.substr(4 + trie_bytes));
}

std::pair<size_t, std::string_view> PrecompiledCharsMap::longest_prefix(
    std::string_view text) const {
  if (units_.empty()) return {0, {}};
  size_t longest = 0;
  uint32_t longest_value = 0;
  size_t node = offset(units_[0]);
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t c = uint8_t(text[i]);
    node ^= c;
    if (node >= units_.size() || label(units_[node]) != c) break;
    const uint32_t unit = units_[node];
    node ^= offset(unit);
    if (has_leaf(unit)) {
      TESSEL_CHECK(node < units_.size(), where_, ": precompiled_charsmap is corrupt (leaf ", node,
                   " of ", units_.size(), ")");
      longest = i + 1;
      longest_value = value(units_[node]);
    }
  }
  if (longest == 0) return {0, {}};
  TESSEL_CHECK(longest_value < normalized_.size(), where_,
               ": precompiled_charsmap is corrupt (string offset ", longest_value, " of ",
               normalized_.size(), ")");
  std::string_view rest(normalized_);
  rest.remove_prefix(longest_value);
  return {longest, rest.substr(0, rest.find('\0'))};
}

}  // namespace tessel::io
