// SPDX-License-Identifier: Apache-2.0
// Models in GGUF files, for every family: which family a file is (general.architecture), its
// config, the model with its weights, and the metadata tessel writes. The per-family halves
// (key names, tensor names, layouts) are Family::config_from_gguf / load_gguf / to_gguf in the
// family folders; the helpers below are what those share.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessel/io/gguf.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/family.h"

namespace tessel::models {

// True when `path` is a file that starts with the GGUF magic.
bool is_gguf_model(const std::string& path);
// The family whose gguf_architecture() is the file's general.architecture; an Error lists them.
const Family& family_for_gguf(const io::GgufFile& file);
ConfigPtr gguf_model_config(const io::GgufFile& file);
// How Linear / Embedding matrices in a GGUF weight format (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, and F16 /
// BF16) load: kept as their blocks, a view of the mapped file that nn::Linear / nn::Embedding
// multiply with in place (inference only, see nn/quantized.h), or widened to f32 parameters (to
// re-export or train from them).
enum class GgufWeights { Quantized, Dequantized };
// Builds the model a GGUF file describes and loads its weights: F32 tensors as f32 parameters,
// other F16 / BF16 tensors widened to f32, matrices in a block format as `weights` says. A
// quantized tensor that is not a Linear or Embedding weight is an Error naming it and its type.
std::shared_ptr<CausalLM> load_gguf_model(const std::string& path,
                                          GgufWeights weights = GgufWeights::Quantized);
// Whether any Linear or Embedding of `model` holds GGUF blocks (quantized, or F16 / BF16).
bool is_quantized_model(CausalLM& model);
// A model directory (config.json) or a GGUF file: its config, and the model.
ConfigPtr load_model_source_config(const std::string& model);
std::shared_ptr<CausalLM> load_model_source(const std::string& model,
                                            GgufWeights weights = GgufWeights::Quantized);

// The metadata of a GGUF holding `model`: general.* (architecture, name, alignment, file_type)
// and the family's config keys. The tokenizer keys are added by the caller.
io::GgufMetadata gguf_model_metadata(const CausalLM& model, const std::string& name,
                                     uint32_t file_type);

// Writing a model as GGUF. `type` is the tensor type of the matrices: f32, f16 or bf16 (1-D
// tensors, the norms and biases, stay f32 as GGUF readers expect), or the quantized q8_0, q4_0,
// q4_k_m and q5_k_m, whose per-tensor types models/gguf_quant_policy.h sets (general.file_type and
// general.quantization_version are written).
struct GgufExportOptions {
  std::string type = "f32";
  std::string name;                          // general.name
  const io::Tokenizer* tokenizer = nullptr;  // its tokenizer.ggml.* keys, when given
};
struct GgufTensorReport {
  size_t index = 0, count = 0;  // 1-based position among the tensors written
  std::string name;             // GGUF name
  Shape shape;
  std::string type;          // ggml type written ("F16")
  double max_abs_error = 0;  // of the stored values against the model's
  double rel_rms_error = 0;  // ||stored - original|| / ||original|| (0 for an all-zero tensor)
  std::string note;          // why a matrix of a quantized export was not quantized, if so
};
// The types --type accepts; check_gguf_export_type throws the Error save_gguf_model would (an
// unknown type, or a quantized one that is not written yet) before any weights are read.
const std::vector<std::string>& gguf_export_types();
void check_gguf_export_type(const std::string& type);
void save_gguf_model(const CausalLM& model, const std::string& path,
                     const GgufExportOptions& options,
                     const std::function<void(const GgufTensorReport&)>& on_tensor = nullptr);

// Metadata reads that name the file and key in errors.
int64_t gguf_int(const io::GgufFile& file, const std::string& key);
std::optional<int64_t> gguf_optional_int(const io::GgufFile& file, const std::string& key);
double gguf_float(const io::GgufFile& file, const std::string& key, double fallback);
// The id a tokenizer key gives (bos / eos), if present.
std::optional<int64_t> gguf_token_id(const io::GgufFile& file, const char* which);

// Loads every parameter of `model` from the GGUF tensor gguf_name(name), shape-checked in tessel
// order, through `to_tessel` (null: as stored); GGUF tensors in `skip` are ignored. One Error
// (`context`) lists every missing, unexpected and mis-shaped tensor in GGUF names.
void load_gguf_tensors(CausalLM& model, const io::GgufFile& file, const std::string& context,
                       const std::function<std::string(const std::string&)>& gguf_name,
                       const std::function<Tensor(const std::string&, const Tensor&)>& to_tessel,
                       const std::set<std::string>& skip = {});
// Whether `leaf` names a stacked expert weight of nn::ExpertMLPs (gate_proj, up_proj, down_proj,
// fc_weight, proj_weight), which a GGUF file in a block format keeps as blocks.
bool is_expert_stack(const std::string& leaf);
// The raw blocks of GGUF tensor `stored` as an i8 view of the mapping that `keep` holds alive:
// with experts = 0 a matrix [rows, row bytes]; else a stack of `experts` whose experts
// [first, first + count) (count -1: all) are returned as [count, rows, row bytes], one byte range
// of the file (an expert-parallel rank's share).
Tensor gguf_blocks_view(const io::GgufFile& file, const std::shared_ptr<const io::GgufFile>& keep,
                        const std::string& stored, int64_t experts, int64_t first = 0,
                        int64_t count = -1);
// The same for `stored` as a GgufLayout finds it: a stack the file keeps one tensor per expert
// gives a view of one expert's tensor when the experts asked for are one, else a copy of their
// blocks (models/gguf_expert_stack.h).
Tensor gguf_blocks_view(const io::GgufFile& file, const std::shared_ptr<const io::GgufFile>& keep,
                        const GgufStored& stored, int64_t experts, int64_t first = 0,
                        int64_t count = -1);
// Whether two tensors in the file hold the same bytes (a tied head written twice).
bool gguf_same_bytes(const io::GgufFile& file, const std::string& a, const std::string& b);

}  // namespace tessel::models
