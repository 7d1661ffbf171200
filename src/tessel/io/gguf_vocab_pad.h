// SPDX-License-Identifier: Apache-2.0
// Pads a GGUF file's token list to the model's vocabulary. A model's embedding may have more rows
// than its tokenizer has tokens (a vocabulary rounded up for the GEMM, a tokenizer copied into a
// bigger random model); GGUF readers such as llama.cpp take the vocabulary size from
// `tokenizer.ggml.tokens` and refuse a `token_embd` of any other height, so the export adds one
// placeholder token per extra row, as Hugging Face's GGUF converters do for padded vocabularies.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/io/gguf.h"

namespace tessel::io {

// The placeholder text of padding token `id`, "[PAD<id>]": unique, and not produced by encoding
// (its type is UNUSED and no merge builds it).
std::string gguf_padding_token(int64_t id);

// Extends `tokenizer.ggml.tokens` to `vocab_size` entries with `gguf_padding_token(i)`, and the
// per-token `token_type` (UNUSED = 5) and `scores` (the lowest score, so a unigram lattice never
// prefers one) arrays with it when present. Nothing to do without a token list or when it already
// has `vocab_size` entries; a list longer than the vocabulary is an Error naming both sizes.
void pad_gguf_vocabulary(GgufMetadata& metadata, int64_t vocab_size);

}  // namespace tessel::io
