// SPDX-License-Identifier: Apache-2.0
// TextStream on real byte-level BPE vocabularies: a small one whose first 256 ids are the bytes
// (tokenizer_test_util.h), so characters can be split anywhere, and GPT-2's (from the tokenizer
// reference fixture). Multibyte characters split across tokens, stop strings spanning tokens, held
// and then released, several at once, at the first token, and the defining property on random
// token sequences: the concatenation equals the decoded text cut before the first stop string to
// appear, in valid UTF-8 pieces.
#include "tessel/serve/detokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/tokenizer_test_util.h"
#include "tessel/io/byte_level.h"

#ifndef TESSEL_GPT2_DIR
#error "TESSEL_GPT2_DIR (where the tokenizer fixture installs GPT-2's files) must be defined"
#endif

namespace tessel::serve {
namespace {

namespace fs = std::filesystem;

// GPT-2's tokenizer, loaded once; null (and every test using it fails) without the fixture.
const io::Tokenizer* gpt2() {
  static const std::unique_ptr<io::Tokenizer> tokenizer = []() -> std::unique_ptr<io::Tokenizer> {
    const char* env = std::getenv("TESSEL_GPT2_DIR");
    const fs::path dir = env && *env ? env : TESSEL_GPT2_DIR;
    if (!fs::exists(dir / "encoder.json")) return nullptr;
    return std::make_unique<io::Tokenizer>(io::Tokenizer::from_vocab_merges(
        (dir / "encoder.json").string(), (dir / "vocab.bpe").string()));
  }();
  return tokenizer.get();
}

#define REQUIRE_GPT2()                                                                \
  ASSERT_NE(gpt2(), nullptr) << "no GPT-2 files in " << TESSEL_GPT2_DIR               \
                             << ": run these tests through ctest, whose fixture "     \
                                "io.tokenizer_reference_setup installs them (or set " \
                                "TESSEL_GPT2_DIR)"

const io::Tokenizer& bytes_tokenizer() {
  static const io::Tokenizer tokenizer(io::small_config());
  return tokenizer;
}

// What one stream produced: each push's piece, the push that stopped (or -1), the whole text.
struct Streamed {
  std::vector<std::string> pieces;
  int64_t stopped_at = -1;  // index of the push that returned stopped; ids.size(): finish()
  std::string text;
  std::optional<size_t> matched;
};

Streamed stream(const io::Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                const std::vector<std::string>& stops) {
  TextStream s(tokenizer, stops);
  Streamed run;
  for (size_t i = 0; i < ids.size(); ++i) {
    const StreamText t = s.push(ids[i]);
    EXPECT_TRUE(io::is_valid_utf8(t.text)) << "push " << i << " returned broken UTF-8";
    if (t.stopped && run.stopped_at < 0) run.stopped_at = int64_t(i);
    if (run.stopped_at >= 0 && int64_t(i) > run.stopped_at) {
      EXPECT_TRUE(t.stopped && t.text.empty()) << "text after the stop, push " << i;
    }
    run.pieces.push_back(t.text);
    run.text += t.text;
  }
  const StreamText last = s.finish();
  EXPECT_TRUE(io::is_valid_utf8(last.text));
  if (last.stopped && run.stopped_at < 0) run.stopped_at = int64_t(ids.size());
  run.text += last.text;
  run.matched = s.matched_stop();
  EXPECT_EQ(s.stopped(), run.stopped_at >= 0);
  return run;
}

std::vector<int32_t> bytes_of(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(io::byte_token(c));
  return ids;
}

TEST(TextStream, MultibyteCharactersSplitAcrossTokensComeOutWhole) {
  const std::string text = "n\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80!";  // n, é, €, 😀, !
  const auto ids = bytes_of(text);
  const Streamed run = stream(bytes_tokenizer(), ids, {});
  EXPECT_EQ(run.text, text);
  const std::vector<std::string> want = {"n", "", "\xC3\xA9",         "", "", "\xE2\x82\xAC", "",
                                         "",  "", "\xF0\x9F\x98\x80", "!"};
  EXPECT_EQ(run.pieces, want);
}

TEST(TextStream, GPT2SplitsCharactersAndTheStreamDoesNot) {
  REQUIRE_GPT2();
  const std::string text = "日本語のテキスト 🎉 naïve café — ünïcødé";
  const auto ids = gpt2()->encode(text);
  int split = 0;  // tokens whose bytes alone are not whole characters
  for (int32_t id : ids) split += !io::is_valid_utf8(gpt2()->decode_bytes(std::vector{id}));
  ASSERT_GT(split, 0) << "the text no longer exercises split characters";
  const Streamed run = stream(*gpt2(), ids, {});
  EXPECT_EQ(run.text, gpt2()->decode(ids));
  EXPECT_EQ(run.text, text);
  EXPECT_EQ(run.stopped_at, -1);
}

TEST(TextStream, UnfinishedCharacterAtTheEndIsRepairedByFinish) {
  const std::vector<int32_t> ids = {'a', 0xE2, 0x82};  // a, then two bytes of €
  const Streamed run = stream(bytes_tokenizer(), ids, {"zz"});
  EXPECT_EQ(run.text, bytes_tokenizer().decode(ids));
  EXPECT_EQ(run.text, "a" + io::repair_utf8("\xE2\x82"));
}

// The index of the first token after which decode(ids[:k]) contains `stop`.
size_t completing_token(const io::Tokenizer& t, const std::vector<int32_t>& ids,
                        const std::string& stop) {
  for (size_t k = 1; k <= ids.size(); ++k) {
    if (t.decode(std::span(ids).first(k)).find(stop) != std::string::npos) return k - 1;
  }
  return ids.size();
}

TEST(TextStream, StopStringSpanningTokensCutsBeforeIt) {
  REQUIRE_GPT2();
  const std::string text = "We said hello world and then kept talking.";
  const auto ids = gpt2()->encode(text);
  const std::string stop = "lo wor";
  const size_t k = completing_token(*gpt2(), ids, stop);
  ASSERT_LT(k, ids.size());
  ASSERT_GT(gpt2()->decode(std::span(ids).first(k)).size(),
            text.find(stop))  // the stop starts in an earlier token than the one completing it
      << "the stop string no longer spans tokens";
  const Streamed run = stream(*gpt2(), ids, {stop});
  EXPECT_EQ(run.text, "We said hel");
  EXPECT_EQ(run.stopped_at, int64_t(k));
  EXPECT_EQ(run.matched, std::optional<size_t>(0));
  // Nothing of the stop string was sent before the stop was known.
  std::string before;
  for (size_t i = 0; i < k; ++i) before += run.pieces[i];
  EXPECT_EQ(text.compare(0, before.size(), before), 0);
  EXPECT_LE(before.size(), text.find(stop));
}

TEST(TextStream, APrefixThatNeverCompletesIsHeldThenReleased) {
  REQUIRE_GPT2();
  const std::string text = "this is the end. Bye";
  const auto ids = gpt2()->encode(text);
  const std::string stop = "the endgame";
  TextStream s(*gpt2(), {stop});
  std::string sent;
  int checked = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const StreamText t = s.push(ids[i]);
    EXPECT_FALSE(t.stopped);
    sent += t.text;
    // Whatever has been decoded, the part that could still begin "the endgame" is not sent yet.
    const std::string all = gpt2()->decode(std::span(ids).first(i + 1));
    if (all == "this is the" || all == "this is the end") {
      EXPECT_EQ(sent, "this is ") << "after '" << all << "'";
      ++checked;
    }
    if (all == "this is the end.") {
      EXPECT_EQ(sent, "this is the end.");
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3) << "GPT-2 no longer splits the text as this test expects";
  sent += s.finish().text;
  EXPECT_EQ(sent, text);
  // Ending while the prefix is held: finish() releases it.
  TextStream cut(*gpt2(), {stop});
  std::string out;
  for (int32_t id : gpt2()->encode("so this is the end")) out += cut.push(id).text;
  EXPECT_EQ(out, "so this is ");
  const StreamText rest = cut.finish();
  EXPECT_EQ(rest.text, "the end");
  EXPECT_FALSE(rest.stopped);
}

TEST(TextStream, SeveralStopStringsTheFirstToAppearWins) {
  REQUIRE_GPT2();
  // " gamma" completes "gam" and "beta gamma" in the same token: the earlier position wins.
  const auto ids = gpt2()->encode("alpha beta gamma delta");
  Streamed run = stream(*gpt2(), ids, {"delta", "gam", "beta gamma"});
  EXPECT_EQ(run.text, "alpha ");
  EXPECT_EQ(run.matched, std::optional<size_t>(2));
  // "bc" appears (and stops the text) before the longer "a bc de", which starts earlier, could
  // complete: the stream cannot take back what the stop already ended.
  run = stream(*gpt2(), gpt2()->encode("xa bc de"), {"a bc de", "bc"});
  EXPECT_EQ(run.text, "xa ");
  EXPECT_EQ(run.matched, std::optional<size_t>(1));
}

TEST(TextStream, StopAtTheVeryFirstToken) {
  REQUIRE_GPT2();
  const auto ids = gpt2()->encode("Hello world");
  TextStream s(*gpt2(), {"Hello"});
  StreamText t = s.push(ids[0]);
  EXPECT_TRUE(t.stopped);
  EXPECT_EQ(t.text, "");
  t = s.push(ids[1]);
  EXPECT_TRUE(t.stopped);
  EXPECT_EQ(t.text, "");
  t = s.finish();
  EXPECT_TRUE(t.stopped);
  EXPECT_EQ(t.text, "");
  // Inside the first token: what comes before it is sent.
  const Streamed run = stream(*gpt2(), ids, {"ell"});
  EXPECT_EQ(run.text, "H");
  EXPECT_EQ(run.stopped_at, 0);
}

TEST(TextStream, MultibyteStopStringSplitAcrossTokens) {
  const std::string text = "caf\xC3\xA9 au lait";  // café au lait, é as two byte tokens
  const Streamed run = stream(bytes_tokenizer(), bytes_of(text), {"\xC3\xA9 au"});
  EXPECT_EQ(run.text, "caf");
  EXPECT_EQ(run.stopped_at, 7);  // "é au" completes with 'u', the eighth byte
}

TEST(TextStream, SpecialTokensAreDecodedAsDecodeDoes) {
  REQUIRE_GPT2();
  const auto eot = gpt2()->special_token_id("<|endoftext|>");
  ASSERT_TRUE(eot.has_value());
  std::vector<int32_t> ids = gpt2()->encode("one");
  ids.push_back(*eot);
  for (int32_t id : gpt2()->encode("two")) ids.push_back(id);
  EXPECT_EQ(stream(*gpt2(), ids, {}).text, gpt2()->decode(ids));
  EXPECT_EQ(stream(*gpt2(), ids, {"|>t"}).text, "one<|endoftext");
}

TEST(TextStream, BadStopStringsAreErrors) {
  io::expect_error([] { TextStream(bytes_tokenizer(), {"ok", ""}); }, {"stop string 1", "empty"});
  io::expect_error([] { TextStream(bytes_tokenizer(), {"\xA9!"}); },
                   {"stop string 0", "not valid UTF-8"});
}

// The reference: the first prefix of ids whose decoded text contains a stop string, cut at the
// earliest occurrence in it; the whole decoded text when none appears.
std::string cut_reference(const io::Tokenizer& t, const std::vector<int32_t>& ids,
                          const std::vector<std::string>& stops, int64_t& stopped_at) {
  stopped_at = -1;
  for (size_t k = 1; k <= ids.size(); ++k) {
    const std::string text = t.decode(std::span(ids).first(k));
    size_t cut = std::string::npos;
    for (const std::string& stop : stops) cut = std::min(cut, text.find(stop));
    if (cut != std::string::npos) {
      stopped_at = int64_t(k - 1);
      return text.substr(0, cut);
    }
  }
  return t.decode(ids);
}

TEST(TextStream, ConcatenationIsTheTextCutBeforeTheFirstStopOnRandomSequences) {
  REQUIRE_GPT2();
  const io::Tokenizer& t = *gpt2();
  std::mt19937_64 rng(2024);
  const std::string replacement = "\xEF\xBF\xBD";
  int stopped = 0, ran = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (int32_t& id : ids) id = int32_t(rng() % uint64_t(t.vocab_size()));
    const std::string full = t.decode(ids);
    std::vector<std::string> stops;
    const int wanted = int(rng() % 4);
    for (int guard = 0; int(stops.size()) < wanted && guard < 50; ++guard) {
      std::string stop;
      if (rng() % 3 == 0 || full.empty()) {
        stop = std::string(1, char('a' + rng() % 26)) + char('a' + rng() % 26);
      } else {
        // A piece of the text itself, on character boundaries, so stops do happen.
        size_t at = rng() % full.size(), len = 1 + rng() % 8;
        while (at > 0 && (uint8_t(full[at]) & 0xC0) == 0x80) --at;
        size_t end = std::min(full.size(), at + len);
        while (end < full.size() && (uint8_t(full[end]) & 0xC0) == 0x80) ++end;
        stop = full.substr(at, end - at);
      }
      // U+FFFD in a stop could match the stand-in for a character not finished yet.
      if (!stop.empty() && stop.find(replacement) == std::string::npos) stops.push_back(stop);
    }
    int64_t want_at = -1;
    const std::string want = cut_reference(t, ids, stops, want_at);
    const Streamed run = stream(t, ids, stops);
    ASSERT_EQ(run.text, want) << "trial " << trial;
    ASSERT_EQ(run.stopped_at, want_at) << "trial " << trial;
    stopped += want_at >= 0;
    ++ran;
  }
  EXPECT_GT(stopped, 50);
  EXPECT_GT(ran - stopped, 50);
}

}  // namespace
}  // namespace tessel::serve
