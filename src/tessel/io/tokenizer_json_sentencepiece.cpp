// SPDX-License-Identifier: Apache-2.0
// Reading a SentencePiece-style tokenizer.json (the layout Hugging Face's converters write for
// Llama 2, Mistral, TinyLlama and unigram models): model BPE (vocab object, merges, byte_fallback,
// fuse_unk, unk_token) or Unigram (vocab as [piece, score] pairs, unk_id, byte_fallback);
// normalizer Prepend / Replace (String patterns) / Sequence; pre_tokenizer null or Metaspace;
// decoder Sequence of Replace / ByteFallback / Fuse / Strip, or Metaspace. Anything else that
// would change the ids or the text is refused, naming the entry.
#include "tessel/core/error.h"
#include "tessel/io/hf_sentencepiece.h"
#include "tessel/io/tokenizer_json.h"

namespace tessel::io::detail {
namespace {

using Spec = HfSentencePieceSpec;

std::string string_pattern(const json& step, const std::string& where) {
  const json* pattern = member(step, "pattern");
  TESSEL_CHECK(pattern && pattern->is_object(), where, ".pattern must be an object");
  const json* literal = member(*pattern, "String");
  TESSEL_CHECK(literal && literal->is_string(), where, ".pattern ", pattern->dump(),
               " is not supported (only {\"String\": ...} patterns)");
  return literal->get<std::string>();
}

std::string string_field(const json& object, const char* key, const std::string& where) {
  const json* v = member(object, key);
  TESSEL_CHECK(v && v->is_string(), where, ".", key, " must be a string");
  return v->get<std::string>();
}

void read_normalizer(const json& n, const std::string& where, Spec& spec) {
  const std::string type = type_of(n, where);
  if (type == "Sequence") {
    const json* list = member(n, "normalizers");
    TESSEL_CHECK(list && list->is_array(), where, ".normalizers must be an array");
    for (size_t i = 0; i < list->size(); ++i) {
      read_normalizer((*list)[i], where + ".normalizers[" + std::to_string(i) + "]", spec);
    }
  } else if (type == "Prepend") {
    spec.normalizer.push_back({true, string_field(n, "prepend", where), ""});
  } else if (type == "Replace") {
    spec.normalizer.push_back({false, string_pattern(n, where), string_field(n, "content", where)});
  } else {
    TESSEL_FAIL(where, ": normalizer '", type,
                "' is not supported (supported: Prepend, Replace with a String pattern, Sequence "
                "of them)");
  }
}

Spec::Metaspace::Scheme prepend_scheme(const json& m, const std::string& where) {
  using Scheme = Spec::Metaspace::Scheme;
  if (const json* s = member(m, "prepend_scheme")) {
    TESSEL_CHECK(s->is_string(), where, ".prepend_scheme must be a string");
    if (*s == "always") return Scheme::kAlways;
    if (*s == "first") return Scheme::kFirst;
    if (*s == "never") return Scheme::kNever;
    TESSEL_FAIL(where, ".prepend_scheme ", s->dump(), " is not always, first or never");
  }
  return flag(m, "add_prefix_space", true, where) ? Scheme::kAlways : Scheme::kNever;
}

std::string replacement(const json& m, const std::string& where) {
  const std::string r =
      member(m, "replacement") ? string_field(m, "replacement", where) : std::string(kMetaspace);
  TESSEL_CHECK(!r.empty(), where, ".replacement must not be empty");
  return r;
}

void read_decoder(const json& d, const std::string& where, Spec& spec) {
  const std::string type = type_of(d, where);
  auto& dec = spec.decoder;
  if (type == "Metaspace") {
    const bool prepend = prepend_scheme(d, where) != Spec::Metaspace::Scheme::kNever;
    dec.steps.push_back({replacement(d, where), " ", true, prepend});
    return;
  }
  TESSEL_CHECK(type == "Sequence", where, ": decoder '", type,
               "' is not supported (supported: Metaspace, or a Sequence of Replace, ByteFallback, "
               "Fuse, Strip)");
  const json* list = member(d, "decoders");
  TESSEL_CHECK(list && list->is_array(), where, ".decoders must be an array");
  // Per-token steps first, then ByteFallback, Fuse and Strip, each at most once, in that order.
  int stage = 0;
  bool fused = false;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string entry = where + ".decoders[" + std::to_string(i) + "]";
    const std::string t = type_of((*list)[i], entry);
    const json& step = (*list)[i];
    const int order = t == "Replace" || t == "Metaspace" ? 0
                      : t == "ByteFallback"              ? 1
                      : t == "Fuse"                      ? 2
                      : t == "Strip"                     ? 3
                                                         : -1;
    TESSEL_CHECK(order >= 0, entry, ": decoder '", t,
                 "' is not supported (supported: Replace, Metaspace, ByteFallback, Fuse, Strip)");
    TESSEL_CHECK(order > stage || (order == 0 && stage == 0), entry, ": '", t,
                 "' after a later step is not supported (expected the order Replace, "
                 "ByteFallback, Fuse, Strip)");
    stage = order;
    if (t == "Replace") {
      dec.steps.push_back({string_pattern(step, entry), string_field(step, "content", entry)});
    } else if (t == "Metaspace") {
      dec.steps.push_back({replacement(step, entry), " ", true,
                           prepend_scheme(step, entry) != Spec::Metaspace::Scheme::kNever});
    } else if (t == "ByteFallback") {
      dec.byte_fallback = true;
    } else if (t == "Fuse") {
      fused = true;
    } else {
      TESSEL_CHECK(fused, entry, ": Strip without a Fuse before it is not supported");
      dec.strip_content = string_field(step, "content", entry);
      for (const auto& [key, slot] :
           {std::pair{"start", &dec.strip_start}, std::pair{"stop", &dec.strip_stop}}) {
        const json* v = member(step, key);
        TESSEL_CHECK(v && v->is_number_unsigned(), entry, ".", key,
                     " must be a non-negative integer");
        *slot = v->get<size_t>();
      }
    }
  }
}

void read_bpe(const json& model, const std::string& where, Spec& spec) {
  if (const json* dropout = member(model, "dropout")) {
    TESSEL_CHECK(dropout->is_number() && dropout->get<double>() == 0.0, where, ".dropout ",
                 dropout->dump(), " is not supported (BPE dropout is a training-time option)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = member(model, key);
    TESSEL_CHECK(!v || *v == "", where, ".", key, " ", v ? v->dump() : "", " is not supported");
  }
  spec.byte_fallback = flag(model, "byte_fallback", false, where);
  spec.fuse_unk = flag(model, "fuse_unk", false, where);
  spec.ignore_merges = flag(model, "ignore_merges", false, where);
  if (member(model, "unk_token")) spec.unk_token = string_field(model, "unk_token", where);
  const json* vocab = member(model, "vocab");
  TESSEL_CHECK(vocab, where, " has no vocab");
  spec.tokens = vocab_from_json(*vocab, where + ".vocab");
  const json* merges = member(model, "merges");
  TESSEL_CHECK(merges && merges->is_array(), where, ".merges must be an array");
  // SentencePiece pieces hold no plain space (it is U+2581), so "a b" is unambiguous.
  spec.merges = merges_from_json(*merges, where + ".merges");
}

void read_unigram(const json& model, const std::string& where, Spec& spec) {
  spec.kind = Spec::Kind::kUnigram;
  spec.byte_fallback = flag(model, "byte_fallback", false, where);
  if (const json* unk = member(model, "unk_id")) {
    TESSEL_CHECK(unk->is_number_integer(), where, ".unk_id must be an integer or null");
    spec.unk_id = unk->get<int32_t>();
  }
  const json* vocab = member(model, "vocab");
  TESSEL_CHECK(vocab && vocab->is_array() && !vocab->empty(), where,
               ".vocab must be a non-empty array of [piece, score]");
  for (size_t i = 0; i < vocab->size(); ++i) {
    const json& e = (*vocab)[i];
    TESSEL_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number(), where,
                 ".vocab[", i, "] ", e.dump(), " must be [piece, score]");
    spec.tokens.push_back(e[0].get<std::string>());
    spec.scores.push_back(e[1].get<double>());
  }
}

}  // namespace

SentencePieceJson read_sentencepiece_json(const json& root, const std::string& path) {
  const std::string where = "tokenizer: " + path + ": ";
  Spec spec;
  spec.source = path;
  const json& model = root.at("model");
  if (model.value("type", "BPE") == "Unigram") {
    read_unigram(model, where + "model", spec);
  } else {
    read_bpe(model, where + "model", spec);
  }
  spec.model_vocab = spec.tokens.size();
  if (const json* n = member(root, "normalizer")) read_normalizer(*n, where + "normalizer", spec);
  if (const json* pre = member(root, "pre_tokenizer")) {
    const std::string w = where + "pre_tokenizer";
    TESSEL_CHECK(type_of(*pre, w) == "Metaspace", w, ": only Metaspace or null is supported here");
    Spec::Metaspace meta;
    meta.replacement = replacement(*pre, w);
    meta.scheme = prepend_scheme(*pre, w);
    meta.split = flag(*pre, "split", true, w);
    spec.pre_tokenizer = meta;
  }
  const json* decoder = member(root, "decoder");
  TESSEL_CHECK(decoder, where,
               "has no decoder; a SentencePiece-style tokenizer.json needs one (e.g. Metaspace, "
               "or Sequence[Replace, ByteFallback, Fuse, Strip])");
  read_decoder(*decoder, where + "decoder", spec);

  SentencePieceJson out;
  settings_from_post_processor(member(root, "post_processor"), where + "post_processor",
                               out.settings);
  if (const json* added = member(root, "added_tokens")) {
    read_added_tokens(*added, where + "added_tokens", out.added);
  }
  // Added tokens restate a vocabulary entry or take the next free ids.
  const size_t n = spec.tokens.size();
  for (const AddedToken& t : out.added) {
    if (size_t(t.id) < n) continue;
    if (size_t(t.id) >= spec.tokens.size()) spec.tokens.resize(size_t(t.id) + 1);
    TESSEL_CHECK(spec.tokens[t.id].empty(), where, "added tokens '", spec.tokens[t.id], "' and '",
                 t.content, "' share id ", t.id);
    spec.tokens[t.id] = t.content;
  }
  for (size_t id = n; id < spec.tokens.size(); ++id) {
    TESSEL_CHECK(!spec.tokens[id].empty(), where, "no token has id ", id,
                 " (added token ids must follow the vocabulary without holes)");
  }
  if (spec.unk_token) out.settings.unk_token = spec.unk_token;
  if (spec.kind == Spec::Kind::kUnigram && spec.unk_id && size_t(*spec.unk_id) < n) {
    out.settings.unk_token = spec.tokens[*spec.unk_id];
  }
  out.spelling = spec.tokens;
  out.model = std::make_shared<const HfSentencePieceModel>(std::move(spec));
  return out;
}

}  // namespace tessel::io::detail
