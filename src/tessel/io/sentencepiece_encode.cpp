// SPDX-License-Identifier: Apache-2.0
// SentencePiece encoding: normalization (normalizer.cc), BPE by piece score (bpe_model.cc),
// unigram Viterbi (unigram_model.cc, EncodeOptimized, the library's default), and the step that
// turns the model's pieces into ids (sentencepiece_processor.cc, PopulateSentencePieceText:
// unknown pieces become byte pieces under byte fallback, else runs of them become one <unk>).
// Arithmetic follows the library's types exactly (float scores, double where it promotes), so
// ties break the same way.
#include <algorithm>
#include <queue>

#include "tessel/io/sentencepiece.h"

namespace tessel::io::detail {
namespace {

// sentencepiece's IsValidDecodeUTF8 (util.h/.cc): the length of the character at text[0] and
// whether it is well-formed; an ill-formed one consumes one byte.
std::pair<bool, size_t> sp_decode_utf8(std::string_view text) {
  const auto b = [&](size_t i) { return uint8_t(text[i]); };
  const auto trail = [&](size_t i) { return (b(i) & 0xC0) == 0x80; };
  const auto valid_cp = [](uint32_t cp) { return cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF); };
  const size_t len = text.size();
  if (b(0) < 0x80) return {true, 1};
  if (len >= 2 && (b(0) & 0xE0) == 0xC0) {
    const uint32_t cp = ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    if (trail(1) && cp >= 0x80 && valid_cp(cp)) return {true, 2};
  } else if (len >= 3 && (b(0) & 0xF0) == 0xE0) {
    const uint32_t cp = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    if (trail(1) && trail(2) && cp >= 0x800 && valid_cp(cp)) return {true, 3};
  } else if (len >= 4 && (b(0) & 0xF8) == 0xF0) {
    const uint32_t cp =
        ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    if (trail(1) && trail(2) && trail(3) && cp >= 0x10000 && valid_cp(cp)) return {true, 4};
  }
  return {false, 1};
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

size_t SentencePieceTokenModel::user_defined_prefix(std::string_view text) const {
  size_t longest = 0;
  user_defined_.prefixes(text, [&](size_t length, int32_t) { longest = length; });
  return longest;
}

std::pair<std::string_view, size_t> SentencePieceTokenModel::normalize_prefix(
    std::string_view text) const {
  if (const size_t n = user_defined_prefix(text)) return {text.substr(0, n), n};
  if (const auto [n, replacement] = charsmap_.longest_prefix(text); n > 0) return {replacement, n};
  const auto [valid, n] = sp_decode_utf8(text);
  if (!valid) return {kReplacement, 1};
  return {text.substr(0, n), n};
}

std::string SentencePieceTokenModel::normalize(std::string_view input) const {
  const auto& spec = m_.normalizer;
  std::string out;
  if (spec.remove_extra_whitespaces) {  // drop leading white space
    while (!input.empty()) {
      const auto p = normalize_prefix(input);
      if (p.first != " ") break;
      input.remove_prefix(p.second);
    }
  }
  if (input.empty()) return out;
  out.reserve(input.size() * 3);
  const std::string_view space = spec.escape_whitespaces ? kMetaspace : std::string_view(" ");
  if (spec.add_dummy_prefix) out += space;
  bool prev_space = spec.remove_extra_whitespaces;
  while (!input.empty()) {
    const auto [replacement, consumed] = normalize_prefix(input);
    std::string_view sp = replacement;
    while (prev_space && !sp.empty() && sp.front() == ' ') sp.remove_prefix(1);
    if (!sp.empty()) {
      for (const char c : sp) {
        if (c == ' ' && spec.escape_whitespaces) {
          out += kMetaspace;
        } else {
          out += c;
        }
      }
      prev_space = sp.back() == ' ';
    }
    input.remove_prefix(consumed);
    if (!spec.remove_extra_whitespaces) prev_space = false;
  }
  if (spec.remove_extra_whitespaces) {  // drop trailing white space
    while (out.size() >= space.size() && std::string_view(out).ends_with(space)) {
      out.resize(out.size() - space.size());
    }
  }
  return out;
}

void SentencePieceTokenModel::encode_bpe(std::string_view text, std::vector<Piece>& result) const {
  struct Symbol {
    int prev, next;
    bool freeze;
    std::string_view piece;
  };
  struct Pair {
    int left, right;
    float score;
    size_t size;
  };
  // Highest score first; among equal scores, the leftmost.
  const auto lower = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> agenda(lower);
  std::vector<Symbol> symbols;
  StringMap<std::pair<std::string_view, std::string_view>> rev_merge;  // unused pieces

  auto add_pair = [&](int left, int right) {
    if (left == -1 || right == -1 || symbols[left].freeze || symbols[right].freeze) return;
    const std::string_view piece(symbols[left].piece.data(),
                                 symbols[left].piece.size() + symbols[right].piece.size());
    const auto it = pieces_.find(piece);
    if (it == pieces_.end()) return;
    agenda.push({left, right, m_.pieces[it->second].score, piece.size()});
    if (type(it->second) == Type::kUnused) {
      rev_merge[std::string(piece)] = {symbols[left].piece, symbols[right].piece};
    }
  };

  for (std::string_view rest = text; !rest.empty();) {
    size_t n = user_defined_prefix(rest);
    const bool freeze = n > 0;
    if (!freeze) n = std::min(rest.size(), one_char_len(rest[0]));
    const int index = int(symbols.size());
    rest.remove_prefix(n);
    symbols.push_back(
        {index - 1, rest.empty() ? -1 : index + 1, freeze, std::string_view(rest.data() - n, n)});
  }
  if (symbols.empty()) return;
  for (size_t i = 1; i < symbols.size(); ++i) add_pair(int(i) - 1, int(i));

  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.piece.empty() || right.piece.empty() ||
        left.piece.size() + right.piece.size() != top.size) {
      continue;  // stale
    }
    left.piece = std::string_view(left.piece.data(), left.piece.size() + right.piece.size());
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.piece = {};
    add_pair(left.prev, top.left);
    add_pair(top.left, left.next);
  }

  // Pieces of type UNUSED are split back into the pieces they were merged from.
  auto resegment = [&](auto&& self, std::string_view w) -> void {
    const int32_t id = piece_to_id(w);
    if (type(id) != Type::kUnused) {
      result.push_back({w, id});
      return;
    }
    const auto p = rev_merge.find(w);
    if (p == rev_merge.end()) {
      result.push_back({w, id});
      return;
    }
    self(self, p->second.first);
    self(self, p->second.second);
  };
  for (int i = 0; i != -1; i = symbols[i].next) resegment(resegment, symbols[i].piece);
}

void SentencePieceTokenModel::encode_unigram(std::string_view text,
                                             std::vector<Piece>& result) const {
  struct Best {
    int32_t id = -1;
    float score = 0;
    int starts_at = -1;
  };
  const int size = int(text.size());
  const float unk_score = min_score_ - 10.0f;  // kUnkPenalty
  std::vector<Best> best(size + 1);
  for (int start = 0; start < size;) {
    const float till_here = best[start].score;
    bool has_single_node = false;
    const int mblen = int(std::min<size_t>(one_char_len(text[start]), size - start));
    trie_.prefixes(text.substr(start), [&](size_t length, int32_t id) {
      if (type(id) == Type::kUnused) return;
      // As the library: the score is a double (a user-defined piece gets a bonus that makes it
      // win), the sum is compared in double and stored as float.
      const double score = type(id) == Type::kUserDefined ? double(float(length) * max_score_) - 0.1
                                                          : double(m_.pieces[id].score);
      const double candidate = score + double(till_here);
      Best& target = best[start + length];
      if (target.starts_at == -1 || candidate > double(target.score)) {
        target = {id, float(candidate), start};
      }
      if (int(length) == mblen) has_single_node = true;
    });
    if (!has_single_node) {
      Best& target = best[start + mblen];
      const float candidate = unk_score + till_here;
      if (target.starts_at == -1 || candidate > target.score) target = {unk_id_, candidate, start};
    }
    start += mblen;
  }
  const size_t first = result.size();
  for (int end = size; end > 0;) {
    const Best& node = best[end];
    result.push_back({text.substr(node.starts_at, end - node.starts_at), node.id});
    end = node.starts_at;
  }
  std::reverse(result.begin() + first, result.end());
}

void SentencePieceTokenModel::encode(std::string_view text, bool, std::vector<int32_t>& out) const {
  const std::string normalized = normalize(text);
  if (normalized.empty()) return;
  std::vector<Piece> pieces;
  if (m_.model_type == SentencePieceModel::ModelType::kBpe) {
    encode_bpe(normalized, pieces);
  } else {
    encode_unigram(normalized, pieces);
  }
  bool prev_unk = false;
  for (const Piece& p : pieces) {
    const bool unk = type(p.id) == Type::kUnknown;
    if (unk && m_.byte_fallback) {
      for (const char c : p.text) out.push_back(byte_ids_[uint8_t(c)]);
    } else if (!(unk && prev_unk)) {  // a run of unknown pieces is one <unk>
      out.push_back(p.id);
    }
    prev_unk = unk;
  }
}

}  // namespace tessel::io::detail
