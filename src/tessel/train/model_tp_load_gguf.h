// SPDX-License-Identifier: Apache-2.0
// A GGUF file loaded straight into this rank's tensor-parallel share, its quantized matrices kept
// as their blocks (the per-shard loading of model_tp_load.h, for GGUF files). The model is built
// without values and cut by the family's plan; each parameter is then
// read from the memory-mapped file through the family's GGUF layout (Family::gguf_layout):
//  - a column-parallel matrix (rows = output features; the vocab-split embedding, an untied LM
//    head) keeps this rank's rows. GGUF stores a quantized row as whole blocks, so a run of
//    consecutive rows is a zero-copy view of the mapping; reordered rows (a family's rotary q / k,
//    stored in interleaved-RoPE order) and the vocabulary padding (zero blocks) are row copies;
//  - a row-parallel matrix (columns = input features) keeps this rank's blocks of every row, a
//    copy. Its split must fall on a block boundary (32 weights for Q8_0 / Q4_0, 256 for the
//    k-quants, 1 for F16 / BF16): a split inside a block is refused with one Error naming the
//    tensor, its width, the block size and tp, on every rank alike;
//  - f32 tensors (and an F32 file's matrices) are read as the safetensors path reads them, only
//    the rank's regions, widened from F16 / BF16 where stored so;
//  - a mixture of experts' stacks (blk.N.ffn_*_exps) keep this rank's FFN columns of every expert
//    (model_expert_pieces.h): gate/up rows of each expert, down columns of every row (whole blocks,
//    refused as above otherwise), copied into blocks with pread.
// The quantized kernels compute each output feature from its row alone, so a column-parallel
// product equals one process's bit for bit; a row-parallel one sums the ranks' partial products,
// which differ from one process's only by the order of the sums (docs/SERVING.md). The file is
// never mapped whole (io::GgufMapping::Windows): a view maps the rows it keeps for as long as it
// lives, a copy maps its tensor while it copies, so a rank's address space (VmPeak) and resident
// memory hold its share of the file, not the file.
//
// A pipeline stage (`--pp`, cli/pp_model.h) passes `keep`: only the parameters it names are read
// and allocated, the others stay shape-only (the model is built so: no bytes, no address space),
// so a stage's rank reads and holds its blocks' bytes only; with no tensor-parallel group the
// model is not cut (one rank per stage). The loader's errors name the layout asking: "tensor
// parallelism", "pipeline parallelism" (a `keep` without a group) or both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/io/gguf.h"
#include "tessel/kernels/quant/quant_format.h"
#include "tessel/models/causal_lm.h"
#include "tessel/models/family.h"
#include "tessel/train/model_expert_pieces.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::train {

struct TpGgufLoaded {
  std::shared_ptr<models::CausalLM> model;  // this rank's share, in eval mode
  std::shared_ptr<ModelTensorParallel> tp;
  int64_t bytes_read = 0;    // tensor bytes of the file this rank read (its share)
  int64_t file_bytes = 0;    // tensor bytes the file holds
  int64_t views = 0;         // matrices bound as zero-copy views of the mapped file
  int64_t copies = 0;        // matrices whose blocks were copied (row-parallel, reordered, padded)
  int64_t expert_bytes = 0;  // a mixture of experts: its experts' bytes on this rank (blocks)
  ExpertPieces pieces;       // a mixture of experts under tp: each expert's FFN columns split
};

// Collective over `tp` (the plan's parallelization is). `note` receives the plan's one-line
// notices (the vocabulary padding). `keep` (default: all) names the parameters to read; a null
// `tp` loads the model whole (the result's tp is null then). `parallelism` (default: derived from
// tp and keep, as above) is what the errors name.
TpGgufLoaded load_gguf_model_tp(const std::string& path, const dist::CommPtr& tp,
                                const std::function<void(const std::string&)>& note = {},
                                const std::function<bool(const std::string&)>& keep = {},
                                const std::string& parallelism = "");

// The blocks of experts [e0, e0 + experts) of a stack stored as GGUF blocks (`whole` = [E, out,
// in] in the file), FFN columns [f0, f0 + f) of each: gate/up/fc rows (dim 1) or down/proj
// columns of every row (dim 2: f0 and f in whole blocks, checked by the caller), read with pread
// into i8 [experts, rows, row bytes] (nothing mapped; from the experts' own tensors in an older
// file with one tensor per expert).
Tensor gguf_expert_stack_piece(const io::GgufFile& file, const models::GgufStored& stored,
                               kernels::quant::QuantType type, const Shape& whole, int64_t e0,
                               int64_t experts, int dim, int64_t f0, int64_t f);

}  // namespace tessel::train
