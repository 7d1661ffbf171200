// SPDX-License-Identifier: Apache-2.0
// GGUF layouts (Family::gguf_layout): which GGUF tensor holds each of a model's tensors, and in
// what row order, checked against the file before anything is read. A tensor-parallel rank reads
// its pieces through it (train/model_tp_load_gguf.h), as a rank reads a safetensors directory
// through Family::hf_layout.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "tessel/io/gguf.h"
#include "tessel/models/family.h"

namespace tessel::models {

// The layout of `model` in `file` from the family's name map (`gguf_name`) and row orders
// (`rope_heads`, null: every tensor as stored); GGUF tensors in `skip` are not loaded. One Error
// (`context`) lists every missing, unexpected and mis-shaped tensor in GGUF names, as
// load_gguf_tensors does.
GgufLayout make_gguf_layout(const CausalLM& model, const io::GgufFile& file,
                            const std::string& context,
                            const std::function<std::string(const std::string&)>& gguf_name,
                            const std::function<int64_t(const std::string&)>& rope_heads,
                            const std::set<std::string>& skip = {});

// The stored row of tessel row `row` of a tensor of `rows` rows kept in Meta's interleaved-RoPE
// order over `heads` heads (each head's rotated pairs are stored as rows (2i, 2i + 1) where tessel
// keeps them at (i, i + head_dim / 2)); `row` itself when heads is 0. The inverse of the
// reordering llama_permute_rope_rows does on export.
int64_t gguf_stored_row(int64_t row, int64_t rows, int64_t heads);

}  // namespace tessel::models
