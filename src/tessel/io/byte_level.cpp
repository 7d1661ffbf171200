// SPDX-License-Identifier: Apache-2.0
// GPT-2's byte-to-unicode table and strict UTF-8 handling (Unicode 15, section 3.9, Table 3-7:
// well-formed byte sequences; U+FFFD substitution of maximal subparts).
#include "tessel/io/byte_level.h"

namespace tessel::io {
namespace {

constexpr bool spells_itself(unsigned b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

struct Tables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, 324> to_byte{};  // indexed by code point; -1 = not in the alphabet
};

const Tables& tables() {
  static const Tables t = [] {
    Tables r;
    r.to_byte.fill(-1);
    unsigned n = 0;
    for (unsigned b = 0; b < 256; ++b) {
      char32_t cp = spells_itself(b) ? char32_t(b) : char32_t(256 + n++);
      r.to_unicode[b] = cp;
      r.to_byte[cp] = int16_t(b);
    }
    return r;
  }();
  return t;
}

// Length of the well-formed sequence at text[pos] (> 0, cp set), or minus the length of the
// maximal subpart of an ill-formed one (< 0): the longest prefix that could still have begun a
// well-formed sequence, at least one byte.
int scan_utf8(std::string_view text, size_t pos, char32_t& cp) {
  auto at = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = at(pos);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  int len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  char32_t value = b0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    if (pos + k >= text.size()) return -k;
    const uint8_t b = at(pos + k);
    const uint8_t min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return -k;
    value = (value << 6) | (b & 0x3F);
  }
  cp = value;
  return len;
}

}  // namespace

char32_t byte_to_unicode(uint8_t b) {
  return tables().to_unicode[b];
}

std::optional<uint8_t> unicode_to_byte(char32_t cp) {
  if (cp >= tables().to_byte.size() || tables().to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables().to_byte[cp]);
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(byte_to_unicode(static_cast<uint8_t>(c)), out);
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const int n = decode_utf8(text, pos, cp);
    if (n == 0) return std::nullopt;
    const auto b = unicode_to_byte(cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    pos += n;
  }
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

int decode_utf8(std::string_view text, size_t pos, char32_t& cp) {
  const int n = scan_utf8(text, pos, cp);
  return n > 0 ? n : 0;
}

std::string repair_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    char32_t cp;
    const int n = scan_utf8(bytes, pos, cp);
    if (n > 0) {
      out.append(bytes.substr(pos, n));
      pos += n;
    } else {
      append_utf8(0xFFFD, out);
      pos += -n;
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp;
    const int n = scan_utf8(text, pos, cp);
    if (n <= 0) return false;
    pos += n;
  }
  return true;
}

}  // namespace tessel::io
