// SPDX-License-Identifier: Apache-2.0
// PCRE2-backed pre-tokenizer. Patterns are compiled with PCRE2_MATCH_INVALID_UTF so that arbitrary
// bytes can be split safely: ill-formed sequences never match and fall into the gaps.
#include "tessel/io/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tessel/core/error.h"

namespace tessel::io {

// \p{White_Space} (PCRE2 10.40 and later) is exactly the set that Python's `regex` module calls
// \s, the engine of the original encoder; PCRE2's own \s in UCP mode would add U+180E.
const char* const kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
    "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";

struct Pretokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buffer));
}

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code)
      : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    TESSEL_CHECK(data != nullptr, "pretokenize: out of memory creating PCRE2 match data");
  }
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

Pretokenizer::Pretokenizer(const std::string& pattern)
    : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  TESSEL_CHECK(compiled_->code != nullptr, "pretokenize: cannot compile pattern '", pattern,
               "' at offset ", offset, ": ", pcre2_message(error));
  // JIT is an optimisation: where the platform lacks it the interpreter gives the same matches.
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

Pretokenizer::~Pretokenizer() = default;

void Pretokenizer::split(std::string_view text,
                         const std::function<void(std::string_view)>& fn) const {
  MatchData md(compiled_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap = 0;     // start of text not yet handed out
  size_t search = 0;  // where the next match may begin
  while (search < text.size()) {
    const int rc =
        compiled_->jit
            ? pcre2_jit_match(compiled_->code, subject, text.size(), search, 0, md.data, nullptr)
            : pcre2_match(compiled_->code, subject, text.size(), search, 0, md.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    TESSEL_CHECK(rc > 0, "pretokenize: matching failed at byte ", search, " of ", text.size(), ": ",
                 pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
    const size_t begin = ov[0], end = ov[1];
    if (end == begin) {
      // An empty match (possible with a caller's pattern) yields no piece; retry one character
      // later, leaving this one in the gap.
      search = begin + 1;
      while (search < text.size() && (static_cast<uint8_t>(text[search]) & 0xC0) == 0x80) ++search;
      continue;
    }
    if (begin > gap) fn(text.substr(gap, begin - gap));
    fn(text.substr(begin, end - begin));
    gap = search = end;
  }
  if (gap < text.size()) fn(text.substr(gap));
}

}  // namespace tessel::io
