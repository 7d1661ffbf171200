// SPDX-License-Identifier: Apache-2.0
// An incremental parser of server-sent events (the WHATWG HTML "event stream" format), as
// OpenAI-compatible servers stream completions: "data: {...}" lines, a blank line ending each
// event, "data: [DONE]" at the end. Bytes arrive in arbitrary pieces from the socket; a line or a
// CRLF pair may be split anywhere, so the parser keeps the unfinished line between calls.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace tessel::serve {

struct SseEvent {
  std::string type = "message";  // the "event:" field; "message" when absent
  std::string data;              // the "data:" lines joined by "\n"
  bool done() const { return data == "[DONE]"; }
};

class SseParser {
 public:
  using Handler = std::function<void(const SseEvent&)>;
  // Parses `bytes` and calls `on_event` for every event completed by them, in order.
  void feed(std::string_view bytes, const Handler& on_event);
  // True when bytes of an unfinished line or event are held: at the end of a stream they are
  // discarded (as the format says) and show that the stream was cut short.
  bool pending() const { return !line_.empty() || has_data_ || !type_.empty(); }
  int64_t events() const { return events_; }

 private:
  void line(std::string_view text, const Handler& on_event);

  std::string line_;       // bytes of the line not yet terminated
  bool after_cr_ = false;  // the last byte was CR: a following LF belongs to the same line end
  std::string data_, type_;
  bool has_data_ = false;
  int64_t events_ = 0;
};

}  // namespace tessel::serve
