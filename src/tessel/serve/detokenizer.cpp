// SPDX-License-Identifier: Apache-2.0
// TextStream: io::StreamDecoder's complete UTF-8, minus the longest tail that could still grow
// into a stop string, cut at the first stop string that appears.
#include "tessel/serve/detokenizer.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "tessel/core/error.h"

namespace tessel::serve {

TextStream::TextStream(const io::Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : decoder_(tokenizer), stops_(std::move(stop_strings)) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    TESSEL_CHECK(!stops_[i].empty(), "detokenizer: stop string ", i, " is empty");
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
  size_t keep = held_.size() - hold;
  // A stop string that begins inside a character (only if it is not valid UTF-8 itself) must not
  // split one: hold the whole character.
  while (keep > 0 && keep < held_.size() && (uint8_t(held_[keep]) & 0xC0) == 0x80) --keep;
  StreamText out{held_.substr(0, keep), false};
  held_.erase(0, keep);
  return out;
}

}  // namespace tessel::serve
