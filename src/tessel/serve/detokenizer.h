// SPDX-License-Identifier: Apache-2.0
// Incremental detokenization for streamed responses: token ids in, text out as soon as it is
// final. Text is final when it is complete UTF-8 (io::StreamDecoder holds back an unfinished
// character or byte-fallback run) and no stop string could still begin inside it; a stop string
// ends the text just before it (OpenAI's semantics: the stop string and everything after it are
// never sent).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessel/io/tokenizer.h"

namespace tessel::serve {

struct StreamText {
  std::string text;      // newly final text (may be empty)
  bool stopped = false;  // a stop string appeared; nothing more will ever be returned
};

class TextStream {
 public:
  // A stop string that is empty or not valid UTF-8 is an Error. Keeps a copy of the tokenizer
  // (cheap, shared).
  TextStream(const io::Tokenizer& tokenizer, std::vector<std::string> stop_strings);

  // Decodes one more token (decoded as Tokenizer::decode does, special tokens included). After a
  // stop, returns {"", true} without decoding.
  StreamText push(int64_t token);
  // The held-back rest when the output ends otherwise (length, EOS, a stop token id): an
  // unfinished character becomes U+FFFD as in decode(); a stop string completed by it still cuts.
  StreamText finish();

  bool stopped() const { return stopped_; }
  // Which stop string ended the text (its index in the constructor's list), once stopped.
  std::optional<size_t> matched_stop() const { return matched_; }

 private:
  StreamText release(std::string&& more, bool last);

  io::StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;  // complete UTF-8 that may still be the start of a stop string
  bool stopped_ = false;
  bool finished_ = false;
  std::optional<size_t> matched_;
};

}  // namespace tessel::serve
