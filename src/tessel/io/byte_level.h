// SPDX-License-Identifier: Apache-2.0
// The byte-level alphabet of GPT-2's BPE (Radford et al. 2019, "bytes_to_unicode"): each of the
// 256 byte values is spelled as one printable code point, so vocabulary files can store arbitrary
// bytes as text. Also the UTF-8 helpers the tokenizer needs (encode, decode, lossy repair).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessel::io {

// The code point that spells byte b: printable Latin-1 bytes spell themselves, the other 68
// (0-32, 127-160, 173) become U+0100 + n in increasing byte order.
char32_t byte_to_unicode(uint8_t b);

// The inverse: the byte a code point spells, or nullopt when it is outside the alphabet.
std::optional<uint8_t> unicode_to_byte(char32_t cp);

// Spells raw bytes in the byte-level alphabet (UTF-8 encoded): " hi" -> "Ġhi".
std::string bytes_to_byte_level(std::string_view bytes);

// Reads a byte-level spelling back into raw bytes; nullopt when the text is not valid UTF-8 or
// holds a code point outside the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view text);

// Appends the UTF-8 encoding of cp (cp must be a Unicode scalar value).
void append_utf8(char32_t cp, std::string& out);

// Decodes one UTF-8 sequence at text[pos]; returns its length and stores the code point, or
// returns 0 when the bytes there are not a well-formed sequence (Unicode Table 3-7).
int decode_utf8(std::string_view text, size_t pos, char32_t& cp);

// The text with every ill-formed subsequence replaced by U+FFFD, one per maximal subpart as
// Unicode recommends (the same result as Python's bytes.decode("utf-8", errors="replace")).
std::string repair_utf8(std::string_view bytes);

// True when every byte sequence in text is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

}  // namespace tessel::io
