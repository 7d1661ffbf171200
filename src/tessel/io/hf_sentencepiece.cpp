// SPDX-License-Identifier: Apache-2.0
// Hugging Face's SentencePiece-style models: encoding and the decoder chain as a stream.
#include "tessel/io/hf_sentencepiece.h"

#include <algorithm>

#include "tessel/core/error.h"
#include "tessel/io/byte_level.h"

namespace tessel::io::detail {
namespace {

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos;) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

// Length of the character at text[pos]; an ill-formed byte counts as one.
size_t char_len(std::string_view text, size_t pos) {
  char32_t cp;
  const int n = decode_utf8(text, pos, cp);
  return n > 0 ? size_t(n) : 1;
}

class HfDecodeStream final : public DecodeStream {
 public:
  HfDecodeStream(const HfSentencePieceModel& m, bool raw)
      : d_(m.spec().decoder), tokens_(m.spec().tokens), raw_(raw), strip_left_(d_.strip_start) {}

  void push(int32_t id, std::string& out) override {
    std::string token = tokens_[id];
    for (const auto& step : d_.steps) {
      if (!step.metaspace) {
        token = replace_all(token, step.text, step.content);
      } else {
        token = replace_all(token, step.text, index_ == 0 && step.prepend ? "" : " ");
      }
    }
    ++index_;
    if (d_.byte_fallback) {
      if (const int b = byte_piece_value(token); b >= 0) {
        run_ += char(b);
        return;
      }
    }
    flush_run(out);
    emit(token, out);
  }

  void finish(std::string& out) override {
    flush_run(out);
    for (size_t i = d_.strip_stop; i < held_; ++i) out += d_.strip_content;
    held_ = 0;
  }

 private:
  // ByteFallback: a run of byte tokens is its text when it is valid UTF-8 as a whole, else one
  // U+FFFD per byte token.
  void flush_run(std::string& out) {
    if (run_.empty()) return;
    if (raw_ || is_valid_utf8(run_)) {
      emit(run_, out);
    } else {
      std::string replaced;
      for (size_t i = 0; i < run_.size(); ++i) replaced += "\xEF\xBF\xBD";
      emit(replaced, out);
    }
    run_.clear();
  }

  // Strip (after Fuse): drops up to strip_start leading and strip_stop trailing strip_content
  // characters of the whole text; trailing ones are held until something else follows.
  void emit(std::string_view text, std::string& out) {
    const std::string& c = d_.strip_content;
    if (c.empty() || (d_.strip_start == 0 && d_.strip_stop == 0)) {
      out += text;
      return;
    }
    for (size_t i = 0; i < text.size();) {
      if (text.substr(i).starts_with(c)) {
        i += c.size();
        if (!started_ && strip_left_ > 0) {
          --strip_left_;
          continue;
        }
        started_ = true;
        if (d_.strip_stop > 0) {
          ++held_;
        } else {
          out += c;
        }
        continue;
      }
      started_ = true;
      for (; held_ > 0; --held_) out += c;
      out += text[i++];
    }
  }

  const HfSentencePieceSpec::Decoder& d_;
  const std::vector<std::string>& tokens_;
  const bool raw_;
  size_t index_ = 0;
  std::string run_;
  size_t strip_left_;
  bool started_ = false;
  size_t held_ = 0;
};

}  // namespace

HfSentencePieceModel::HfSentencePieceModel(HfSentencePieceSpec spec) : s_(std::move(spec)) {
  const std::string where = "tokenizer: " + s_.source + ": model";
  TESSEL_CHECK(s_.model_vocab > 0 && s_.model_vocab <= s_.tokens.size(), where,
               " has an empty vocabulary");
  vocab_.reserve(s_.model_vocab);
  for (size_t id = 0; id < s_.model_vocab; ++id) {
    const auto [it, fresh] = vocab_.emplace(s_.tokens[id], int32_t(id));
    TESSEL_CHECK(fresh, where, ".vocab: token '", s_.tokens[id], "' appears twice, with ids ",
                 it->second, " and ", id);
  }
  if (s_.kind == HfSentencePieceSpec::Kind::kBpe) {
    for (size_t rank = 0; rank < s_.merges.size(); ++rank) {
      const auto& [a, b] = s_.merges[rank];
      const std::string entry = where + ".merges[" + std::to_string(rank) + "] '" + a + " " + b;
      const auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
      TESSEL_CHECK(ia != vocab_.end(), entry, "': '", a, "' is not in the vocabulary");
      TESSEL_CHECK(ib != vocab_.end(), entry, "': '", b, "' is not in the vocabulary");
      TESSEL_CHECK(im != vocab_.end(), entry, "': the merged token '", a + b,
                   "' is not in the vocabulary");
      merges_.add(ia->second, ib->second, int32_t(rank), im->second);
    }
    if (s_.unk_token) {
      const auto it = vocab_.find(*s_.unk_token);
      TESSEL_CHECK(it != vocab_.end(), where, ".unk_token '", *s_.unk_token,
                   "' is not in the vocabulary");
      unk_ = it->second;
    }
  } else {
    TESSEL_CHECK(s_.scores.size() == s_.model_vocab, where, ".vocab: scores missing");
    TESSEL_CHECK(!s_.unk_id || (*s_.unk_id >= 0 && size_t(*s_.unk_id) < s_.model_vocab), where,
                 ".unk_id ", s_.unk_id.value_or(-1), " is out of range [0, ", s_.model_vocab, ")");
    min_score_ = *std::min_element(s_.scores.begin(), s_.scores.end());
    for (size_t id = 0; id < s_.model_vocab; ++id) trie_.insert(s_.tokens[id], int32_t(id));
  }
}

void HfSentencePieceModel::encode(std::string_view text, bool at_start,
                                  std::vector<int32_t>& out) const {
  std::string s(text);
  for (const auto& step : s_.normalizer) {
    if (step.prepend) {
      if (!s.empty()) s = step.text + s;
    } else {
      s = replace_all(s, step.text, step.content);
    }
  }
  if (!s_.pre_tokenizer) {
    encode_word(s, out);
    return;
  }
  const auto& meta = *s_.pre_tokenizer;
  s = replace_all(s, " ", meta.replacement);
  using Scheme = HfSentencePieceSpec::Metaspace::Scheme;
  if ((meta.scheme == Scheme::kAlways || (meta.scheme == Scheme::kFirst && at_start)) &&
      !std::string_view(s).starts_with(meta.replacement)) {
    s = meta.replacement + s;
  }
  if (!meta.split) {
    encode_word(s, out);
    return;
  }
  // Split before every replacement character (MergedWithNext).
  const std::string_view all(s);
  size_t begin = 0;
  for (size_t hit = all.find(meta.replacement, 1); hit != std::string_view::npos;
       hit = all.find(meta.replacement, hit + meta.replacement.size())) {
    encode_word(all.substr(begin, hit - begin), out);
    begin = hit;
  }
  encode_word(all.substr(begin), out);
}

void HfSentencePieceModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (s_.kind == HfSentencePieceSpec::Kind::kBpe) {
    encode_bpe(word, out);
  } else {
    encode_unigram(word, out);
  }
}

void HfSentencePieceModel::encode_bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (s_.ignore_merges) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  bool pending_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t n = char_len(word, i);
    const std::string_view ch = word.substr(i, n);
    i += n;
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk) symbols.push_back(*unk_);
      pending_unk = false;
      symbols.push_back(it->second);
      continue;
    }
    if (s_.byte_fallback) {
      std::vector<int32_t> bytes;
      for (const char c : ch) {
        const auto it = vocab_.find(byte_piece(uint8_t(c)));
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == ch.size()) {  // (a pending unknown stays pending, as in tokenizers)
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_) {
      if (pending_unk && !s_.fuse_unk) symbols.push_back(*unk_);
      pending_unk = true;
    }  // without an unk_token the character is dropped, as in tokenizers
  }
  if (pending_unk) symbols.push_back(*unk_);
  bpe_merge(merges_, symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void HfSentencePieceModel::encode_unigram(std::string_view word, std::vector<int32_t>& out) const {
  struct Best {
    double score = 0;
    int64_t starts_at = -1;
    int32_t id = -1;
  };
  const size_t size = word.size();
  const double unk_score = min_score_ - 10.0;
  const int32_t unk = s_.unk_id.value_or(-1);
  std::vector<Best> best(size + 1);
  for (size_t start = 0; start < size;) {
    const double till_here = best[start].score;
    bool has_single_node = false;
    const size_t mblen = char_len(word, start);
    trie_.prefixes(word.substr(start), [&](size_t length, int32_t id) {
      const double candidate = s_.scores[id] + till_here;
      Best& target = best[start + length];
      if (target.starts_at < 0 || candidate > target.score) {
        target = {candidate, int64_t(start), id};
      }
      if (length == mblen) has_single_node = true;
    });
    if (!has_single_node) {
      Best& target = best[start + mblen];
      const double candidate = unk_score + till_here;
      if (target.starts_at < 0 || candidate > target.score) {
        target = {candidate, int64_t(start), unk};
      }
    }
    start += mblen;
  }
  // Back to front; runs of unknown pieces are fused into one string.
  std::vector<std::string_view> pieces;
  size_t unk_begin = 0, unk_end = 0;  // the fused run [unk_begin, unk_end), empty when none
  for (size_t end = size; end > 0;) {
    const Best& node = best[end];
    const size_t start = size_t(node.starts_at);
    if (s_.unk_id && node.id == unk) {
      if (unk_end == unk_begin) unk_end = end;
      unk_begin = start;
    } else {
      if (unk_end > unk_begin) pieces.push_back(word.substr(unk_begin, unk_end - unk_begin));
      unk_begin = unk_end = 0;
      pieces.push_back(word.substr(start, end - start));
    }
    end = start;
  }
  if (unk_end > unk_begin) pieces.push_back(word.substr(unk_begin, unk_end - unk_begin));
  std::reverse(pieces.begin(), pieces.end());
  for (const std::string_view piece : pieces) {
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      continue;
    }
    if (s_.byte_fallback) {
      std::vector<int32_t> bytes;
      for (const char c : piece) {
        const auto it = vocab_.find(byte_piece(uint8_t(c)));
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == piece.size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    TESSEL_CHECK(s_.unk_id, "tokenizer: ", s_.source, ": '", piece,
                 "' is not in the vocabulary and the Unigram model has no unk_id");
    out.push_back(unk);
  }
}

std::unique_ptr<DecodeStream> HfSentencePieceModel::decoder(bool raw) const {
  return std::make_unique<HfDecodeStream>(*this, raw);
}

}  // namespace tessel::io::detail
