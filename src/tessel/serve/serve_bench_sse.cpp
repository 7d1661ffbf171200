// SPDX-License-Identifier: Apache-2.0
// Server-sent events, parsed as the WHATWG HTML standard's "event stream interpretation" says:
// lines end in CRLF, LF or CR; a line starting with ':' is a comment; "field: value" drops one
// space after the colon; a blank line dispatches the event when it has data.
#include "tessel/serve/serve_bench_sse.h"

namespace tessel::serve {

void SseParser::feed(std::string_view bytes, const Handler& on_event) {
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\r' && c != '\n') {
      after_cr_ = false;
      continue;
    }
    if (c == '\n' && after_cr_ && i == start && line_.empty()) {
      // The LF of a CRLF whose CR ended the previous line (possibly in the previous piece).
      after_cr_ = false;
      start = i + 1;
      continue;
    }
    line_.append(bytes.substr(start, i - start));
    after_cr_ = c == '\r';
    std::string text;
    text.swap(line_);
    line(text, on_event);
    start = i + 1;
  }
  line_.append(bytes.substr(start));
}

void SseParser::line(std::string_view text, const Handler& on_event) {
  if (text.empty()) {
    if (has_data_) {
      SseEvent e;
      if (!type_.empty()) e.type = type_;
      e.data = data_;
      ++events_;
      on_event(e);
    }
    data_.clear();
    type_.clear();
    has_data_ = false;
    return;
  }
  if (text.front() == ':') return;  // a comment (servers send them as keep-alives)
  const size_t colon = text.find(':');
  std::string_view field = text.substr(0, colon), value;
  if (colon != std::string_view::npos) {
    value = text.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    type_ = std::string(value);
  }
  // "id", "retry" and unknown fields do not change what a benchmark measures.
}

}  // namespace tessel::serve
