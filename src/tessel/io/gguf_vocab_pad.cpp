// SPDX-License-Identifier: Apache-2.0
// Padding of a GGUF token list to the model's vocabulary (see gguf_vocab_pad.h for why).
#include "tessel/io/gguf_vocab_pad.h"

#include <algorithm>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/io/gguf_tokenizer_keys.h"

namespace tessel::io {

namespace {

// GGUF token type of a placeholder: UNUSED, SentencePiece's number for a piece never emitted.
constexpr int32_t kUnusedTokenType = 5;

}  // namespace

std::string gguf_padding_token(int64_t id) {
  return "[PAD" + std::to_string(id) + "]";
}

void pad_gguf_vocabulary(GgufMetadata& metadata, int64_t vocab_size) {
  using namespace detail::gguf_keys;
  const GgufValue* tokens = metadata.find(kTokens);
  if (!tokens) return;
  std::vector<GgufValue> items = tokens->as_array(kTokens);
  const int64_t n = int64_t(items.size());
  TESSEL_CHECK(n <= vocab_size, "GGUF export: the tokenizer has ", n,
               " tokens, more than the model's vocabulary of ", vocab_size);
  if (n == vocab_size) return;
  for (int64_t i = n; i < vocab_size; ++i)
    items.push_back(GgufValue::of_string(gguf_padding_token(i)));
  metadata.set(kTokens, GgufValue::of_array(GgufType::String, std::move(items)));

  if (const GgufValue* types = metadata.find(kTypes)) {
    std::vector<GgufValue> t = types->as_array(kTypes);
    TESSEL_CHECK(int64_t(t.size()) == n, "GGUF export: ", kTypes, " has ", t.size(),
                 " entries for ", n, " tokens");
    const GgufType elem = types->elem;
    t.resize(size_t(vocab_size), GgufValue::of_int(elem, kUnusedTokenType));
    metadata.set(kTypes, GgufValue::of_array(elem, std::move(t)));
  }
  if (const GgufValue* scores = metadata.find(kScores)) {
    std::vector<GgufValue> s = scores->as_array(kScores);
    TESSEL_CHECK(int64_t(s.size()) == n, "GGUF export: ", kScores, " has ", s.size(),
                 " entries for ", n, " tokens");
    double lowest = 0;
    for (const GgufValue& v : s) lowest = std::min(lowest, v.as_double(kScores));
    const GgufType elem = scores->elem;
    s.resize(size_t(vocab_size), GgufValue::of_float(elem, lowest - 1));
    metadata.set(kScores, GgufValue::of_array(elem, std::move(s)));
  }
}

}  // namespace tessel::io
