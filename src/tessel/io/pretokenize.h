// SPDX-License-Identifier: Apache-2.0
// Pre-tokenization: splitting text into the pieces that BPE encodes independently, with a
// regular expression compiled by PCRE2 (Unicode properties, lookahead; JIT-compiled).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tessel::io {

// GPT-2's pattern, with \s written as \p{White_Space}: the set the original encoder's regex engine
// used (PCRE2's \s would also count U+180E, JavaScript's U+FEFF but not U+0085).
extern const char* const kGpt2Pattern;

// Splits text into the matches of a pattern. Text between matches (only ill-formed UTF-8 can be
// left over by GPT-2's pattern, which matches every character) becomes pieces too, so the
// pieces always concatenate back to the input. Thread-safe; cheap to share.
class Pretokenizer {
 public:
  // Compiles pattern in UTF + UCP mode; a bad pattern throws tessel::Error naming the position.
  explicit Pretokenizer(const std::string& pattern);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Calls fn(piece) for each piece of text in order.
  void split(std::string_view text, const std::function<void(std::string_view)>& fn) const;

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace tessel::io
