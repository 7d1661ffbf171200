// SPDX-License-Identifier: Apache-2.0
// A mixture of experts' stacked weight in either of llama.cpp's GGUF layouts: one tensor per
// projection holding every expert (blk.N.ffn_gate_exps.weight, dims [in, out, experts]; what
// llama.cpp writes since 2024 and what tessel writes), or one tensor per expert
// (blk.N.ffn_gate.E.weight, dims [in, out]; older Mixtral files). Families name the stacked tensor
// (their gguf_name); the loaders find either through these, so every load path (one process,
// --tp, --pp, --ep) reads both. Expert e's bytes are the same in both layouts (a stack is its
// experts' tensors back to back), so a range of a stack is a range of the experts' tensors: within
// one expert it is a view of that tensor, across experts a copy (nothing makes the per-expert
// tensors adjacent, or in expert order, in the file).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessel/io/gguf.h"
#include "tessel/models/family.h"

namespace tessel::models {

// The per-expert names of stacked GGUF name `stacked` (blk.N.X_exps.weight -> blk.N.X.E.weight,
// E in [0, experts)); empty when `stacked` does not name a stack.
std::vector<std::string> gguf_expert_names(const std::string& stacked, int64_t experts);

// Where `file` keeps the tessel tensor of `shape` that the family names `stored`: that tensor,
// or, when the file has no such tensor and `stored` names a stack of shape[0] experts, its
// experts' tensors (each of shape shape[1:], all of one type). The GGUF names it takes go into
// `wanted`. When the tensor is absent or mis-shaped, a line in GGUF names goes into `missing` or
// `mismatched` (for the load's one Error) and the result is empty.
std::optional<GgufStored> find_gguf_stored(const io::GgufFile& file, const std::string& stored,
                                           const Shape& shape, std::set<std::string>& wanted,
                                           std::vector<std::string>& missing,
                                           std::vector<std::string>& mismatched);

// The tensor info of `stored`: the file's, or the stack its experts' tensors form (dims
// [in, out, experts], their type, nbytes their sum, no offset).
io::GgufTensorInfo gguf_stored_info(const io::GgufFile& file, const GgufStored& stored);

// Bytes [begin, begin + length) (default: all) of `stored` in the stack's byte order: the file's
// map() of its tensor, or of one expert's tensor when the range lies within it; a range over
// several experts' tensors is a copy of their bytes.
io::GgufBytes gguf_stored_bytes(const io::GgufFile& file, const GgufStored& stored,
                                uint64_t begin = 0, std::optional<uint64_t> length = std::nullopt);

// Copies bytes [begin, begin + size) of `stored` in the stack's byte order into `dst` with pread
// (the file's read of its tensor, or of the experts' tensors the range covers); maps nothing.
void gguf_stored_read(const io::GgufFile& file, const GgufStored& stored, uint64_t begin, void* dst,
                      size_t size);

// `stored` as a Tensor in `want` (file.load of its tensor, or of its experts' tensors stacked):
// F32, F16, BF16; a quantized type is file.load's Error.
Tensor gguf_stored_load(const io::GgufFile& file, const GgufStored& stored, DType want);

}  // namespace tessel::models
