// SPDX-License-Identifier: Apache-2.0
// Tokenizer core: validation of a TokenizerConfig, added-token matching, the encode path
// (pre-tokenize, map bytes to byte tokens, BPE merge, per-piece cache) and decoding.
#include "tessel/io/tokenizer.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <unordered_map>

#include "tessel/core/error.h"
#include "tessel/io/bpe.h"
#include "tessel/io/byte_level.h"
#include "tessel/io/pretokenize.h"
#include "tessel/io/tokenizer_model.h"

namespace tessel::io {
namespace {

using detail::StringMap;

// Pieces longer than this are not cached: they are rare, and would crowd out the common ones.
constexpr size_t kMaxCachedPiece = 128;

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Start of the run of white space that ends at text[end] (stops at `floor`).
size_t white_space_before(std::string_view text, size_t end, size_t floor) {
  while (end > floor) {
    size_t start = end - 1;
    while (start > floor && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    char32_t cp;
    if (decode_utf8(text, start, cp) != int(end - start) || !is_white_space(cp)) break;
    end = start;
  }
  return end;
}

// End of the run of white space that starts at text[begin].
size_t white_space_after(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    char32_t cp;
    const int n = decode_utf8(text, begin, cp);
    if (n == 0 || !is_white_space(cp)) break;
    begin += n;
  }
  return begin;
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::vector<std::string> spelling;  // by id, model vocab then added tokens
  std::vector<std::string> bytes;     // by id: what decoding emits
  StringMap<int32_t> spelling_to_id;
  StringMap<int32_t> bytes_to_id;  // model vocab only: the ignore_merges lookup
  std::array<int32_t, 256> byte_id{};
  BpeMerges merges;
  std::vector<std::pair<int32_t, int32_t>> merge_order;  // (left, right) by rank, for export
  std::vector<AddedToken> added;
  std::vector<size_t> added_by_length;          // indices into added, longest first
  std::array<bool, 256> added_first_byte{};     // some added token starts with this byte
  std::array<bool, 256> ordinary_first_byte{};  // ... some non-special one does
  // Empty: each segment is one piece. Else each splits every piece of the one before.
  std::vector<std::unique_ptr<Pretokenizer>> pretokenizers;
  bool add_prefix_space = false;
  bool ignore_merges = false;
  std::string pretokenizer_name;
  // Set for every algorithm but byte-level BPE; it then encodes and decodes (the byte-level
  // fields above stay empty).
  std::shared_ptr<const detail::TokenModel> model;

  mutable std::mutex cache_mutex;
  mutable StringMap<std::pair<uint32_t, uint32_t>> cache;  // piece -> (offset, count) in arena
  mutable std::vector<int32_t> arena;
  size_t cache_capacity = size_t{1} << 16;

  void build(TokenizerConfig& config);
  void index_added();
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out, bool at_start) const;
  void split_and_encode(size_t stage, std::string_view text, std::vector<int32_t>& out) const;
};

void Tokenizer::Impl::build(TokenizerConfig& config) {
  source = config.source;
  const std::string where = "tokenizer: " + source + ": ";
  const size_t n = config.vocab.size();
  TESSEL_CHECK(n > 0, where, "the vocabulary is empty");
  TESSEL_CHECK(n + config.added_tokens.size() < size_t{INT32_MAX}, where, "the vocabulary has ", n,
               " tokens, more than int32 ids can address");
  spelling = std::move(config.vocab);
  bytes.resize(n);
  spelling_to_id.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const auto [it, fresh] = spelling_to_id.emplace(spelling[id], int32_t(id));
    TESSEL_CHECK(fresh, where, "token '", spelling[id], "' appears twice, with ids ", it->second,
                 " and ", id);
    // A token spelled outside the byte-level alphabet decodes to its own UTF-8, as in HF.
    auto raw = byte_level_to_bytes(spelling[id]);
    bytes[id] = raw ? std::move(*raw) : spelling[id];
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(byte_to_unicode(uint8_t(b)), ch);
    const auto it = spelling_to_id.find(ch);
    TESSEL_CHECK(it != spelling_to_id.end(), where, "the vocabulary has no token for byte ", b,
                 " ('", ch, "'); a byte-level BPE needs all 256");
    byte_id[b] = it->second;
  }
  auto describe = [&](size_t i) {
    return config.describe_merge ? config.describe_merge(i) : "merge " + std::to_string(i);
  };
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [a, b] = config.merges[rank];
    const auto ia = spelling_to_id.find(a), ib = spelling_to_id.find(b);
    TESSEL_CHECK(ia != spelling_to_id.end(), where, describe(rank), " '", a, " ", b, "': '", a,
                 "' is not in the vocabulary");
    TESSEL_CHECK(ib != spelling_to_id.end(), where, describe(rank), " '", a, " ", b, "': '", b,
                 "' is not in the vocabulary");
    const auto im = spelling_to_id.find(a + b);
    TESSEL_CHECK(im != spelling_to_id.end(), where, describe(rank), " '", a, " ", b,
                 "': the merged token '", a + b, "' is not in the vocabulary");
    merges.add(ia->second, ib->second, int32_t(rank), im->second);
    merge_order.emplace_back(ia->second, ib->second);
  }
  if (config.ignore_merges) {
    bytes_to_id.reserve(n);
    for (size_t id = 0; id < n; ++id) bytes_to_id.emplace(bytes[id], int32_t(id));
  }

  // Added tokens either restate a vocab entry or extend the vocabulary with the next ids.
  const size_t total = n + std::count_if(config.added_tokens.begin(), config.added_tokens.end(),
                                         [&](const AddedToken& t) { return t.id >= int64_t(n); });
  spelling.resize(total);
  bytes.resize(total);
  for (const AddedToken& t : config.added_tokens) {
    TESSEL_CHECK(!t.content.empty(), where, "added token with id ", t.id, " has empty content");
    TESSEL_CHECK(t.id >= 0 && size_t(t.id) < total, where, "added token '", t.content, "' has id ",
                 t.id, ", out of range [0, ", total, ") (ids must be dense)");
    if (size_t(t.id) < n) {
      TESSEL_CHECK(bytes[t.id] == t.content, where, "added token '", t.content, "' has id ", t.id,
                   ", which the vocabulary gives to '", spelling[t.id], "'");
    } else {
      TESSEL_CHECK(spelling[t.id].empty(), where, "added tokens '", spelling[t.id], "' and '",
                   t.content, "' share id ", t.id);
      spelling[t.id] = t.content;
      bytes[t.id] = t.content;
      spelling_to_id.emplace(t.content, t.id);
    }
    for (const AddedToken& u : added) {
      TESSEL_CHECK(u.content != t.content, where, "added token '", t.content,
                   "' is listed twice (ids ", u.id, " and ", t.id, ")");
    }
    added.push_back(t);
  }
  index_added();

  TESSEL_CHECK(config.pattern || config.then_patterns.empty(), where,
               "further pre-tokenizer regexes need a first one");
  if (config.pattern) config.then_patterns.insert(config.then_patterns.begin(), *config.pattern);
  for (const std::string& pattern : config.then_patterns) {
    try {
      pretokenizers.push_back(std::make_unique<Pretokenizer>(pattern));
    } catch (const Error& e) {
      TESSEL_FAIL(where, e.what());
    }
  }
  add_prefix_space = config.add_prefix_space;
  ignore_merges = config.ignore_merges;
  pretokenizer_name = std::move(config.pretokenizer_name);
}

void Tokenizer::Impl::index_added() {
  for (const AddedToken& t : added) {
    added_first_byte[uint8_t(t.content[0])] = true;
    if (!t.special) ordinary_first_byte[uint8_t(t.content[0])] = true;
  }
  added_by_length.resize(added.size());
  for (size_t i = 0; i < added.size(); ++i) added_by_length[i] = i;
  std::stable_sort(added_by_length.begin(), added_by_length.end(), [&](size_t x, size_t y) {
    return added[x].content.size() > added[y].content.size();
  });
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[uint8_t(piece[0])]);
    return;
  }
  if (ignore_merges) {
    if (const auto it = bytes_to_id.find(piece); it != bytes_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= kMaxCachedPiece && cache_capacity > 0;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (const auto it = cache.find(piece); it != cache.end()) {
      const int32_t* ids = arena.data() + it->second.first;
      out.insert(out.end(), ids, ids + it->second.second);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.resize(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) symbols[i] = byte_id[uint8_t(piece[i])];
  bpe_merge(merges, symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.size() >= cache_capacity) {
      cache.clear();
      arena.clear();
    }
    cache.emplace(piece, std::make_pair(uint32_t(arena.size()), uint32_t(symbols.size())));
    arena.insert(arena.end(), symbols.begin(), symbols.end());
  }
}

void Tokenizer::Impl::encode_ordinary(std::string_view text, std::vector<int32_t>& out,
                                      bool at_start) const {
  if (text.empty()) return;
  if (model) {
    model->encode(text, at_start, out);
    return;
  }
  std::string prefixed;
  if (add_prefix_space && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  split_and_encode(0, text, out);
}

void Tokenizer::Impl::split_and_encode(size_t stage, std::string_view text,
                                       std::vector<int32_t>& out) const {
  if (stage == pretokenizers.size()) {
    encode_piece(text, out);
    return;
  }
  pretokenizers[stage]->split(
      text, [&](std::string_view piece) { split_and_encode(stage + 1, piece, out); });
}

Tokenizer::Tokenizer(TokenizerConfig config) : impl_(std::make_shared<Impl>()) {
  impl_->build(config);
}

Tokenizer Tokenizer::from_model(std::string source, std::vector<std::string> spelling,
                                std::vector<AddedToken> added,
                                std::shared_ptr<const detail::TokenModel> model,
                                TokenizerSettings settings) {
  Tokenizer tok;
  tok.impl_ = std::make_shared<Impl>();
  Impl& m = *tok.impl_;
  const std::string where = "tokenizer: " + source + ": ";
  m.source = std::move(source);
  m.spelling = std::move(spelling);
  m.model = std::move(model);
  TESSEL_CHECK(!m.spelling.empty(), where, "the vocabulary is empty");
  m.spelling_to_id.reserve(m.spelling.size());
  for (size_t id = 0; id < m.spelling.size(); ++id) m.spelling_to_id.emplace(m.spelling[id], id);
  for (const AddedToken& t : added) {
    TESSEL_CHECK(!t.content.empty(), where, "added token with id ", t.id, " has empty content");
    TESSEL_CHECK(t.id >= 0 && size_t(t.id) < m.spelling.size(), where, "added token '", t.content,
                 "' has id ", t.id, ", out of range [0, ", m.spelling.size(), ")");
    TESSEL_CHECK(m.spelling[t.id] == t.content, where, "added token '", t.content, "' has id ",
                 t.id, ", which the vocabulary gives to '", m.spelling[t.id], "'");
    for (const AddedToken& u : m.added) {
      TESSEL_CHECK(u.content != t.content, where, "added token '", t.content,
                   "' is listed twice (ids ", u.id, " and ", t.id, ")");
    }
    m.added.push_back(t);
  }
  m.index_added();
  tok.settings_ = std::make_shared<const TokenizerSettings>(std::move(settings));
  return tok;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out,
                              bool allow_special) const {
  const Impl& m = *impl_;
  const auto& first = allow_special ? m.added_first_byte : m.ordinary_first_byte;
  // Added tokens split the text first, leftmost-longest; the segments between them are encoded
  // as ordinary text.
  size_t segment = 0;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!first[uint8_t(text[pos])]) continue;
    const AddedToken* hit = nullptr;
    for (size_t i : m.added_by_length) {
      const AddedToken& t = m.added[i];
      if ((t.special && !allow_special) || text.compare(pos, t.content.size(), t.content) != 0) {
        continue;
      }
      hit = &t;
      break;
    }
    if (!hit) continue;
    const size_t begin = hit->lstrip ? white_space_before(text, pos, segment) : pos;
    size_t end = pos + hit->content.size();
    if (hit->rstrip) end = white_space_after(text, end);
    m.encode_ordinary(text.substr(segment, begin - segment), out, segment == 0);
    out.push_back(hit->id);
    segment = end;
    pos = end - 1;
  }
  m.encode_ordinary(text.substr(segment), out, segment == 0);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  encode_append(text, ids, allow_special);
  return ids;
}

namespace {

std::string decode_with(const detail::TokenModel& model, std::span<const int32_t> ids, size_t vocab,
                        bool raw) {
  std::string out;
  const auto stream = model.decoder(raw);
  for (int32_t id : ids) {
    TESSEL_CHECK(id >= 0 && size_t(id) < vocab, "tokenizer decode: id ", id,
                 " is out of range [0, ", vocab, ")");
    stream->push(id, out);
  }
  stream->finish(out);
  return out;
}

}  // namespace

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids) const {
  if (impl_->model) return decode_with(*impl_->model, ids, impl_->spelling.size(), true);
  std::string out;
  for (int32_t id : ids) {
    TESSEL_CHECK(id >= 0 && size_t(id) < impl_->bytes.size(), "tokenizer decode: id ", id,
                 " is out of range [0, ", impl_->bytes.size(), ")");
    out += impl_->bytes[id];
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  if (impl_->model) return decode_with(*impl_->model, ids, impl_->spelling.size(), false);
  return repair_utf8(decode_bytes(ids));
}

const detail::TokenModel* Tokenizer::impl_model() const {
  return impl_->model.get();
}

std::vector<int32_t> Tokenizer::encode_with_special_tokens(std::string_view text,
                                                           bool allow_special) const {
  std::vector<int32_t> ids;
  if (settings_->add_bos_token) {
    const auto bos = bos_token_id();
    TESSEL_CHECK(bos, "tokenizer: add_bos_token is set but the tokenizer has no bos_token");
    ids.push_back(*bos);
  }
  encode_append(text, ids, allow_special);
  if (settings_->add_eos_token) {
    const auto eos = eos_token_id();
    TESSEL_CHECK(eos, "tokenizer: add_eos_token is set but the tokenizer has no eos_token");
    ids.push_back(*eos);
  }
  return ids;
}

std::optional<int32_t> Tokenizer::bos_token_id() const {
  return settings_->bos_token ? token_id(*settings_->bos_token) : std::nullopt;
}

std::optional<int32_t> Tokenizer::eos_token_id() const {
  return settings_->eos_token ? token_id(*settings_->eos_token) : std::nullopt;
}

std::optional<int32_t> Tokenizer::pad_token_id() const {
  return settings_->pad_token ? token_id(*settings_->pad_token) : std::nullopt;
}

int64_t Tokenizer::vocab_size() const {
  return int64_t(impl_->spelling.size());
}

std::vector<std::pair<std::string, std::string>> Tokenizer::bpe_merges() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(impl_->merge_order.size());
  for (auto [a, b] : impl_->merge_order) out.emplace_back(impl_->spelling[a], impl_->spelling[b]);
  return out;
}

std::optional<std::string> Tokenizer::pretokenizer_pattern() const {
  if (impl_->pretokenizers.empty()) return std::nullopt;
  return impl_->pretokenizers.front()->pattern();
}

std::vector<std::string> Tokenizer::pretokenizer_patterns() const {
  std::vector<std::string> out;
  for (const auto& p : impl_->pretokenizers) out.push_back(p->pattern());
  return out;
}

bool Tokenizer::ignores_merges() const {
  return impl_->ignore_merges;
}

bool Tokenizer::adds_prefix_space() const {
  return impl_->add_prefix_space;
}

const std::string& Tokenizer::pretokenizer_name() const {
  return impl_->pretokenizer_name;
}

const std::string& Tokenizer::token(int32_t id) const {
  TESSEL_CHECK(id >= 0 && size_t(id) < impl_->spelling.size(), "tokenizer token: id ", id,
               " is out of range [0, ", impl_->spelling.size(), ")");
  return impl_->spelling[id];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view spelling) const {
  const auto it = impl_->spelling_to_id.find(spelling);
  if (it == impl_->spelling_to_id.end()) return std::nullopt;
  return it->second;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added;
}

std::optional<int32_t> Tokenizer::special_token_id(std::string_view content) const {
  for (const AddedToken& t : impl_->added) {
    if (t.special && t.content == content) return t.id;
  }
  return std::nullopt;
}

void Tokenizer::set_cache_capacity(size_t pieces) {
  std::lock_guard<std::mutex> lock(impl_->cache_mutex);
  impl_->cache_capacity = pieces;
  impl_->cache.clear();
  impl_->arena.clear();
}

void Tokenizer::clear_cache() const {
  std::lock_guard<std::mutex> lock(impl_->cache_mutex);
  impl_->cache.clear();
  impl_->arena.clear();
}

size_t Tokenizer::cache_size() const {
  std::lock_guard<std::mutex> lock(impl_->cache_mutex);
  return impl_->cache.size();
}

}  // namespace tessel::io
