// SPDX-License-Identifier: Apache-2.0
// TextStream: io::StreamDecoder's complete UTF-8, minus the longest tail that could still grow
// into a stop string, cut at the first stop string that appears.
#include "tessel/serve/detokenizer.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "tessel/core/error.h"
#include "tessel/io/byte_level.h"

namespace tessel::serve {

TextStream::TextStream(const io::Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : decoder_(tokenizer), stops_(std::move(stop_strings)) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    TESSEL_CHECK(!stops_[i].empty(), "detokenizer: stop string ", i, " is empty");
    // Valid UTF-8 begins at a character boundary, so a cut before it never splits a character.
    TESSEL_CHECK(io::is_valid_utf8(stops_[i]), "detokenizer: stop string ", i,
                 " is not valid UTF-8");
  }
}

StreamText TextStream::push(int64_t token) {
  if (stopped_) return {"", true};
  TESSEL_CHECK(!finished_, "detokenizer: push(", token, ") after finish()");
  TESSEL_CHECK(token >= 0 && token <= std::numeric_limits<int32_t>::max(), "detokenizer: token ",
               token, " is not a token id");
  return release(decoder_.push(int32_t(token)), false);
}

StreamText TextStream::finish() {
  if (stopped_) return {"", true};
  if (finished_) return {"", false};
  finished_ = true;
  return release(decoder_.finish(), true);
}

StreamText TextStream::release(std::string&& more, bool last) {
  held_ += more;
  // The earliest stop string wins; at the same position, the first listed.
  size_t cut = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = held_.find(stops_[i]);
    if (at < cut) {
      cut = at;
      matched_ = i;
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    held_.resize(cut);
    return {std::exchange(held_, {}), true};
  }
  if (last) return {std::exchange(held_, {}), false};
  // Hold the longest tail that is a proper prefix of some stop string: the next token may
  // complete it. Everything before it can never be part of a stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(stop.size() - 1, held_.size()); len > hold; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  const size_t keep = held_.size() - hold;
  StreamText out{held_.substr(0, keep), false};
  held_.erase(0, keep);
  return out;
}

}  // namespace tessel::serve
