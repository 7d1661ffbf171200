// SPDX-License-Identifier: Apache-2.0
// A mixture-of-experts model directory loaded straight into this rank's expert-parallel share for
// inference (parallel/expert/expert_inference.h): the model is built without values, every MoE
// layer keeps only this rank's num_experts / ep experts, and the rank reads from the safetensors
// files the dense tensors whole and, of the stacked expert tensors, only its experts' stored
// tensors (train/checkpoint/safetensors_regions.h). DeepSpeed-MoE's placement for inference: the
// expert weights, most of a sparse MoE model, are spread over the ranks, so each rank's resident
// memory is the dense part plus 1 / ep of the experts. GGUF files load the same way
// (load_gguf_model_ep).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tessel/dist/communicator.h"
#include "tessel/models/causal_lm.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::train {

struct EpLoadedModel {
  std::shared_ptr<models::CausalLM> model;  // this rank's share, in eval mode
  std::shared_ptr<ModelTensorParallel> tp;  // under --ep with --tp: the dense parts' split
  int64_t expert_bytes = 0;                 // the bytes of this rank's expert tensors
  int64_t values_read = 0;                  // weight values this rank read from the files
  int64_t layers = 0;                       // MoE layers split
  // A GGUF file: the tensor bytes this rank read (its dense tensors and its experts' byte ranges)
  // and the tensor bytes the file holds.
  int64_t bytes_read = 0, file_bytes = 0;
};

// The one clear refusal of splitting the model of `dir`/config.json over `ep` ranks ("" when
// it can be): no MoE layer, or a layer whose expert count ep does not divide. Reads no weight.
std::string expert_parallel_load_error(const std::string& dir, int ep);

// `dir` holds config.json and safetensors weights (a model directory or a whole-model tessel
// checkpoint). Collective over `ep` (the MoE layers' dispatch gathers over it in every forward).
// With `tp` as well (--ep E --tp T, the trainer's mesh: tp groups of adjacent world ranks, ep
// groups of the ranks with one tp rank): the dense parts split by the family's tensor-parallel
// plan over `tp` as load_model_tp splits them (`note` receives its notices), and each of the
// rank's experts' FFN columns split over `tp` (model_expert_pieces.h): a rank holds E / ep experts
// × F / tp columns and reads only those. `keep` (default: all) names the parameters to read, for
// a pipeline stage under --ep with --pp: the others stay shape-only (no bytes, no address space),
// and the expert bytes count the kept stacks only.
EpLoadedModel load_model_ep(const std::string& dir, const dist::CommPtr& ep,
                            const dist::CommPtr& tp = nullptr,
                            const std::function<void(const std::string&)>& note = {},
                            const std::function<bool(const std::string&)>& keep = {});

// The same for a GGUF file whose family stores its experts as stacks, one tensor per projection
// (blk.N.ffn_*_exps of dims [in, out, experts], the family's GgufLayout naming them): the file is
// opened for windows; each rank reads the dense tensors as a whole-model GGUF load reads them
// (quantized matrices kept as views), and of every stack only its experts' byte range, which is
// contiguous in the file (expert e's rows follow expert e - 1's) and the only part it maps: a
// stack in a block format (Q8_0, Q4_K, Q6_K, F16, ...) becomes a view of that range, multiplied in
// place by the quantized grouped product; an F32 stack is read into f32. An older file with one
// tensor per expert (blk.N.ffn_gate.E.weight) gives the rank its experts' tensors, copied into its
// stack (models/gguf_expert_stack.h). The refusal is expert_parallel_load_error's, for the file's
// config.
// With `tp` (--ep with --tp): the dense part cut as load_gguf_model_tp cuts it, and of each of the
// rank's experts only its FFN columns (model_expert_pieces.h), block stacks copied with pread
// (down columns on block boundaries, refused otherwise), float stacks read run by run.
// `keep` as for load_model_ep; `parallelism` (default: from tp) is what the errors name.
std::string expert_parallel_gguf_error(const std::string& path, int ep);
EpLoadedModel load_gguf_model_ep(const std::string& path, const dist::CommPtr& ep,
                                 const dist::CommPtr& tp = nullptr,
                                 const std::function<void(const std::string&)>& note = {},
                                 const std::function<bool(const std::string&)>& keep = {},
                                 const std::string& parallelism = "");

}  // namespace tessel::train
