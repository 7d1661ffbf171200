// SPDX-License-Identifier: Apache-2.0
// Byte-level BPE pieces that need no external files: the byte alphabet, UTF-8 repair, the GPT-2
// pre-tokenization pattern, both BPE merge strategies against a direct transcription of the
// reference algorithm, added and special tokens, and the tokenizer built from a small vocabulary.
// Against GPT-2's real vocabulary: tokenizer_reference/tokenizer_reference_test.cpp.
#include "tessel/io/tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "common/tokenizer_test_util.h"
#include "tessel/core/error.h"
#include "tessel/io/bpe.h"
#include "tessel/io/byte_level.h"
#include "tessel/io/pretokenize.h"

namespace tessel::io {
namespace {

TEST(ByteLevel, TableIsGpt2s) {
  EXPECT_EQ(byte_to_unicode(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_to_unicode(0), U'\u0100');
  EXPECT_EQ(byte_to_unicode(127), char32_t(0x100 + 33));
  EXPECT_EQ(byte_to_unicode(173), U'\u0143');  // the last of the 68 remapped bytes
  EXPECT_EQ(byte_to_unicode('A'), U'A');
  EXPECT_EQ(byte_to_unicode(0xFF), U'\u00FF');
  std::vector<bool> seen(0x144, false);
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = byte_to_unicode(uint8_t(b));
    ASSERT_LT(cp, seen.size());
    EXPECT_FALSE(seen[cp]) << "two bytes spell U+" << std::hex << uint32_t(cp);
    seen[cp] = true;
    EXPECT_EQ(unicode_to_byte(cp), uint8_t(b));
  }
  EXPECT_EQ(unicode_to_byte(U'\u00AD'), std::nullopt);  // soft hyphen is remapped, not itself
  EXPECT_EQ(unicode_to_byte(U' '), std::nullopt);
  EXPECT_EQ(unicode_to_byte(U'\u0144'), std::nullopt);
  EXPECT_EQ(unicode_to_byte(U'\u20AC'), std::nullopt);
}

TEST(ByteLevel, SpellingRoundTripsEveryByte) {
  EXPECT_EQ(bytes_to_byte_level(" hi\n"), "\u0120hi\u010A");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  const std::string spelled = bytes_to_byte_level(all);
  EXPECT_TRUE(is_valid_utf8(spelled));
  EXPECT_EQ(byte_level_to_bytes(spelled), all);
  EXPECT_EQ(byte_level_to_bytes("\u20AC"), std::nullopt);  // outside the alphabet
  EXPECT_EQ(byte_level_to_bytes("a\xC3"), std::nullopt);   // cut UTF-8
}

// Expected strings from Python: bytes.decode("utf-8", errors="replace").
TEST(Utf8, RepairReplacesMaximalSubpartsLikePython) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""},
      {"plain", "plain"},
      {"\xE2\x82", r},
      {"\xF0\x80\x80", r + r + r},
      {"\xED\xA0\x80", r + r + r},  // a surrogate
      {"\xC0\xAF", r + r},          // overlong
      {"a\xFF"
       "b",
       "a" + r + "b"},
      {"\xE2\x82\xAC", "\xE2\x82\xAC"},
      {"\xF4\x90\x80\x80", r + r + r + r},  // above U+10FFFF
      {"\xF0\x9F\x98", r},
      {"\xF0\x9F\x98\x80\x80", "\xF0\x9F\x98\x80" + r},
      {"\x80\x80", r + r},
      {"\xE0\x80\xAF", r + r + r},
      {"\xF8\x88\x80\x80\x80", r + r + r + r + r},
      {"\xEF\xBF\xBF", "\xEF\xBF\xBF"},
      {"\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF"},
      {"\xE1\x80\xE2\xF0\x91\x92\xF1\xBF"
       "A",
       r + r + r + r + "A"},
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(repair_utf8(in), want) << testing::PrintToString(in);
    EXPECT_EQ(is_valid_utf8(in), in == want) << testing::PrintToString(in);
  }
}

std::vector<std::string> pieces(const Pretokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  p.split(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

TEST(Pretokenize, Gpt2PatternSplitsLikeTheReference) {
  const Pretokenizer p(kGpt2Pattern);
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(p, ""), V{});
  EXPECT_EQ(pieces(p, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces(p, "I'm here"), (V{"I", "'m", " here"}));
  EXPECT_EQ(pieces(p, "IT'S"), (V{"IT", "'", "S"}));  // the contractions are lower case only
  EXPECT_EQ(pieces(p, " 's"), (V{" '", "s"}));
  EXPECT_EQ(pieces(p, "a  b"), (V{"a", " ", " b"}));  // the last space joins the word
  EXPECT_EQ(pieces(p, "a \n"), (V{"a", " \n"}));
  EXPECT_EQ(pieces(p, "\t\tx"), (V{"\t", "\t", "x"}));
  EXPECT_EQ(pieces(p, "x1y22 333"), (V{"x", "1", "y", "22", " 333"}));
  EXPECT_EQ(pieces(p, "f(x) -> y;"), (V{"f", "(", "x", ")", " ->", " y", ";"}));
  EXPECT_EQ(pieces(p, "caf\u00e9 \u4f60\u597d"), (V{"caf\u00e9", " \u4f60\u597d"}));
  EXPECT_EQ(pieces(p, "e\u0301"), (V{"e", "\u0301"}));  // a combining mark is not a letter
  // \s is Unicode White_Space, as in the original encoder: NEL is space, U+180E is not.
  EXPECT_EQ(pieces(p, "\u0085\u0085x"), (V{"\u0085", "\u0085", "x"}));
  EXPECT_EQ(pieces(p, "\u180e\u180ex"), (V{"\u180e\u180e", "x"}));
  EXPECT_EQ(pieces(p, "a\u3000\u3000b"), (V{"a", "\u3000", "\u3000", "b"}));
  // Ill-formed UTF-8 never matches and is handed out as the gaps between matches.
  EXPECT_EQ(pieces(p,
                   "ab\xFF\xFE"
                   "cd"),
            (V{"ab", "\xFF\xFE", "cd"}));
  EXPECT_EQ(pieces(p, " \xC3"), (V{" ", "\xC3"}));
}

TEST(Pretokenize, PiecesAlwaysConcatenateToTheInput) {
  const Pretokenizer p(kGpt2Pattern);
  std::mt19937 gen(13);
  const std::vector<std::string> alphabet = {
      "a",    "Z",    " ",    "  ",     "\t",     "\n",     "\r\n",
      "'s",   "'",    "7",    "!",      "\u00e9", "\u4e00", "\xF0\x9F\x98\x80",
      "\xFF", "\xC3", "\x80", "\u00a0", "\u0301"};
  for (int trial = 0; trial < 257; ++trial) {
    std::string text;
    for (size_t n = gen() % 33; n > 0; --n) text += alphabet[gen() % alphabet.size()];
    std::string joined;
    for (const std::string& piece : pieces(p, text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, text);
  }
}

TEST(Pretokenize, MegabyteRunsSplitWithoutStackTrouble) {
  const Pretokenizer p(kGpt2Pattern);
  const size_t n = size_t{1} << 20;
  EXPECT_EQ(pieces(p, std::string(n, 'a')).size(), 1u);
  EXPECT_EQ(pieces(p, std::string(n, ' ')).size(), 1u);
  EXPECT_EQ(pieces(p, std::string(n, ' ') + "x").size(), 2u);
  EXPECT_EQ(pieces(p, std::string(n, '7')).size(), 1u);
}

TEST(Pretokenize, BadPatternNamesTheOffset) {
  try {
    Pretokenizer p("a(b");
    FAIL() << "compiled an unbalanced pattern";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pretokenize: cannot compile pattern 'a(b' at offset 3"),
              std::string::npos)
        << e.what();
  }
}

// A direct transcription of the reference merge loop (openai/gpt-2 encoder.py `bpe`): rebuild
// the word each step, merging every occurrence of the best pair left to right.
std::vector<int32_t> reference_bpe(const BpeMerges& merges, std::vector<int32_t> word) {
  while (word.size() > 1) {
    const BpeMerges::Merge* best = nullptr;
    int32_t a = 0, b = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto* m = merges.find(word[i], word[i + 1]);
      if (m && (!best || m->rank < best->rank)) best = m, a = word[i], b = word[i + 1];
    }
    if (!best) break;
    std::vector<int32_t> next;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
        next.push_back(best->merged);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = std::move(next);
  }
  return word;
}

// Random merge tables over a small alphabet, with ranks in an arbitrary order (so a merge may
// outrank the merges that made its parts), and random words of odd lengths. The reference loop
// compares ids, which stand for token strings one to one.
TEST(Bpe, BothStrategiesMatchTheReferenceLoop) {
  std::mt19937 gen(33);
  for (int table = 0; table < 20; ++table) {
    const int32_t alphabet = 2 + int32_t(gen() % 4);
    int32_t next_id = alphabet;
    std::vector<std::array<int32_t, 3>> list;
    for (int k = 0; k < 40; ++k) {
      const int32_t left = int32_t(gen() % next_id), right = int32_t(gen() % next_id);
      // Sometimes two pairs make the same token, as "a"+"bc" and "ab"+"c" can.
      int32_t merged = next_id;
      if (next_id > alphabet && gen() % 4 == 0)
        merged = alphabet + int32_t(gen() % (next_id - alphabet));
      if (merged == left || merged == right) merged = next_id;
      if (merged == next_id) ++next_id;
      list.push_back({left, right, merged});
    }
    std::shuffle(list.begin(), list.end(), gen);
    BpeMerges merges;
    for (size_t r = 0; r < list.size(); ++r) {
      merges.add(list[r][0], list[r][1], int32_t(r), list[r][2]);
    }
    for (size_t n : {1, 7, 13, 33, 257, 1000}) {
      std::vector<int32_t> word(n);
      for (int32_t& s : word) s = int32_t(gen() % alphabet);
      const std::vector<int32_t> want = reference_bpe(merges, word);
      std::vector<int32_t> linear = word, heap = word, either = word;
      bpe_merge_linear(merges, linear);
      bpe_merge_heap(merges, heap);
      bpe_merge(merges, either);
      EXPECT_EQ(linear, want) << "table " << table << ", n " << n;
      EXPECT_EQ(heap, want) << "table " << table << ", n " << n;
      EXPECT_EQ(either, want);
    }
  }
}

TEST(Bpe, MergeTableKeepsTheLastRankOfARepeatedPair) {
  BpeMerges merges;
  EXPECT_EQ(merges.find(1, 2), nullptr);
  for (int32_t i = 0; i < 1000; ++i) merges.add(i, i + 1, i, 5000 + i);  // forces growth
  merges.add(1, 2, 7000, 9);
  EXPECT_EQ(merges.size(), 1000u);
  ASSERT_NE(merges.find(1, 2), nullptr);
  EXPECT_EQ(merges.find(1, 2)->rank, 7000);
  EXPECT_EQ(merges.find(1, 2)->merged, 9);
  EXPECT_EQ(merges.find(2, 1), nullptr);
  EXPECT_EQ(merges.find(999, 1000)->merged, 5999);
}

TEST(Tokenizer, SmallVocabularyEncodesAndDecodes) {
  const Tokenizer tok(small_config());
  const int32_t the = *tok.token_id("\u0120the"), he = *tok.token_id("he");
  EXPECT_EQ(tok.encode(" the"), (std::vector<int32_t>{the}));
  EXPECT_EQ(tok.encode("the"), (std::vector<int32_t>{'t', he}));
  EXPECT_EQ(tok.encode(" the the"), (std::vector<int32_t>{the, the}));
  EXPECT_EQ(tok.encode(""), (std::vector<int32_t>{}));
  EXPECT_EQ(tok.decode(tok.encode("so the end\n")), "so the end\n");
  EXPECT_EQ(tok.token(the), "\u0120the");
  EXPECT_EQ(tok.vocab_size(), 262);
  std::vector<int32_t> appended = {7};
  tok.encode_append(" the", appended);
  EXPECT_EQ(appended, (std::vector<int32_t>{7, the}));
}

TEST(Tokenizer, SpecialTokensOnlyWhenAllowedOrdinaryAddedTokensAlways) {
  TokenizerConfig config = small_config();
  config.added_tokens = {{262, "<|eot|>", true}, {263, "<pad>", false}, {264, "<|eot|>!", true}};
  const Tokenizer tok(std::move(config));
  const std::vector<int32_t> x = tok.encode("x"), y = tok.encode("y");
  EXPECT_EQ(tok.encode("x<|eot|>y", true), (std::vector<int32_t>{x[0], 262, y[0]}));
  EXPECT_EQ(tok.encode("<|eot|>!", true), (std::vector<int32_t>{264}));  // leftmost, then longest
  const std::vector<int32_t> plain = tok.encode("x<|eot|>y");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 262), 0);
  EXPECT_EQ(tok.decode(plain), "x<|eot|>y");
  EXPECT_EQ(tok.encode("x<pad>"), (std::vector<int32_t>{x[0], 263}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{262, 263}), "<|eot|><pad>");
  EXPECT_EQ(tok.special_token_id("<|eot|>"), 262);
  EXPECT_EQ(tok.special_token_id("<pad>"), std::nullopt);  // added, but not special
  EXPECT_EQ(tok.vocab_size(), 265);
}

TEST(Tokenizer, AddedTokensCanAbsorbNeighbouringWhiteSpace) {
  TokenizerConfig config = small_config();
  config.added_tokens = {{262, "<mask>", true, /*lstrip=*/true, /*rstrip=*/false},
                         {263, "<sep>", true, /*lstrip=*/false, /*rstrip=*/true}};
  const Tokenizer tok(std::move(config));
  // " b" has no token of its own here: it is Ġ, b.
  EXPECT_EQ(tok.encode("a \u3000 <mask> b", true),
            (std::vector<int32_t>{'a', 262, byte_token(' '), 'b'}));
  EXPECT_EQ(tok.encode("a<sep> \n b", true), (std::vector<int32_t>{'a', 263, 'b'}));
  EXPECT_EQ(tok.encode(" <mask>", true), (std::vector<int32_t>{262}));
  EXPECT_EQ(tok.encode("a <sep>", true), (std::vector<int32_t>{'a', byte_token(' '), 263}));
}

TEST(Tokenizer, IgnoreMergesTakesWholeVocabularyTokens) {
  TokenizerConfig config = small_config();
  config.merges.clear();
  const Tokenizer plain(config);
  config.ignore_merges = true;
  const Tokenizer whole(std::move(config));
  const int32_t the = *whole.token_id("\u0120the");
  EXPECT_EQ(whole.encode(" the"), (std::vector<int32_t>{the}));
  EXPECT_EQ(plain.encode(" the"), (std::vector<int32_t>{byte_token(' '), 't', 'h', 'e'}));
  EXPECT_EQ(whole.encode(" then"), plain.encode(" then"));  // not a vocab token: BPE as usual
}

TEST(Tokenizer, PrefixSpaceAndNoPattern) {
  TokenizerConfig config = small_config();
  config.add_prefix_space = true;
  const Tokenizer prefixed(config);
  EXPECT_EQ(prefixed.encode("the"), prefixed.encode(" the"));
  config.add_prefix_space = false;
  const Tokenizer split(config);
  config.pattern.reset();  // the whole text is one piece, so "e!" can merge across "he" | "!"
  const Tokenizer whole(std::move(config));
  const int32_t he = *whole.token_id("he"), e_bang = *whole.token_id("e!");
  EXPECT_EQ(split.encode("the!"), (std::vector<int32_t>{'t', he, '!'}));
  EXPECT_EQ(whole.encode("the!"), (std::vector<int32_t>{'t', 'h', e_bang}));
}

TEST(Tokenizer, DecodeRejectsIdsOutOfRange) {
  const Tokenizer tok(small_config());
  for (int32_t bad : {-1, 262, 1 << 30}) {
    expect_error(
        [&] {
          tok.decode(std::vector<int32_t>{0, bad});
        },
        {"tokenizer decode: id " + std::to_string(bad), "out of range [0, 262)"});
    expect_error([&] { tok.token(bad); }, {"tokenizer token: id " + std::to_string(bad)});
  }
}

}  // namespace
}  // namespace tessel::io
