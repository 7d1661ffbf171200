// SPDX-License-Identifier: Apache-2.0
// The server-sent events parser of `tessel bench serve`: the same events whether the stream
// arrives whole, byte by byte or cut at every CRLF, with comments, multi-line data and event types.
#include "tessel/serve/serve_bench_sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessel::serve {
namespace {

std::vector<SseEvent> parse_in_pieces(const std::string& stream, size_t piece,
                                      bool* pending = nullptr) {
  SseParser p;
  std::vector<SseEvent> events;
  for (size_t i = 0; i < stream.size(); i += piece) {
    p.feed(std::string_view(stream).substr(i, piece),
           [&](const SseEvent& e) { events.push_back(e); });
  }
  if (pending) *pending = p.pending();
  EXPECT_EQ(p.events(), int64_t(events.size()));
  return events;
}

// What an OpenAI-compatible server streams: two chunks, a keep-alive comment, then [DONE].
const std::string kStream =
    "data: {\"choices\":[{\"text\":\"Hel\"}]}\n\n"
    ": keep-alive\n\n"
    "data: {\"choices\":[{\"text\":\"lo\"}]}\n\n"
    "data: [DONE]\n\n";

TEST(ServeBenchSse, OpenAiStreamInAnyPieces) {
  for (size_t piece : {kStream.size(), size_t(1), size_t(2), size_t(7), size_t(13)}) {
    bool pending = true;
    const std::vector<SseEvent> e = parse_in_pieces(kStream, piece, &pending);
    ASSERT_EQ(e.size(), 3u) << "pieces of " << piece;
    EXPECT_EQ(e[0].data, "{\"choices\":[{\"text\":\"Hel\"}]}");
    EXPECT_EQ(e[1].data, "{\"choices\":[{\"text\":\"lo\"}]}");
    EXPECT_EQ(e[0].type, "message");
    EXPECT_FALSE(e[1].done());
    EXPECT_TRUE(e[2].done());
    EXPECT_FALSE(pending);
  }
}

TEST(ServeBenchSse, CrLfAndCrLineEndsSplitAnywhere) {
  const std::string crlf = "data: a\r\n\r\ndata: b\r\n\r\n";
  const std::string cr = "data: a\r\rdata: b\r\r";
  for (const std::string& s : {crlf, cr}) {
    for (size_t piece : {size_t(1), size_t(3), size_t(8), s.size()}) {
      const std::vector<SseEvent> e = parse_in_pieces(s, piece);
      ASSERT_EQ(e.size(), 2u) << "pieces of " << piece;
      EXPECT_EQ(e[0].data, "a");
      EXPECT_EQ(e[1].data, "b");
    }
  }
}

TEST(ServeBenchSse, MultiLineDataEventTypesAndFieldSpacing) {
  const std::string s =
      "event: error\ndata: first\ndata:second\ndata:  two spaces\n\n"
      "data\n\n"              // a field without a colon: empty data
      "id: 7\nretry: 10\n\n"  // no data: nothing is dispatched
      "data: after\n\n";
  const std::vector<SseEvent> e = parse_in_pieces(s, 5);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].type, "error");
  EXPECT_EQ(e[0].data, "first\nsecond\n two spaces");
  EXPECT_EQ(e[1].type, "message");  // the type does not carry over to the next event
  EXPECT_EQ(e[1].data, "");
  EXPECT_EQ(e[2].data, "after");
}

TEST(ServeBenchSse, AnUnfinishedEventIsHeldNotDispatched) {
  bool pending = false;
  EXPECT_TRUE(parse_in_pieces("data: {\"choices\":[]}\n", 4, &pending).empty());
  EXPECT_TRUE(pending);
  EXPECT_TRUE(parse_in_pieces("data: {\"cho", 4, &pending).empty());
  EXPECT_TRUE(pending);
  EXPECT_EQ(parse_in_pieces("data: x\n\n", 4, &pending).size(), 1u);
  EXPECT_FALSE(pending);
}

}  // namespace
}  // namespace tessel::serve
