// SPDX-License-Identifier: Apache-2.0
// A model family: one architecture (GPT-2, LLaMA, ...) as the rest of tessel knows it. The
// registry maps a Hugging Face config.json (its "architectures" list, else its "model_type") to
// the family that reads it; each family parses its configs (errors name the key), names its
// presets, and maps its parameters to Hugging Face tensor names both ways. Checkpoint directories
// in the HF layout (config.json + model.safetensors, or shards with model.safetensors.index.json)
// are read and written through the family, so `tessel init|train|eval|generate` take any of them.
// Adding an architecture: a folder models/<name>/ with a Family, a ModelConfig and a CausalLM, and
// one line in family_registry.cpp; docs/MODELS.md has the checklist.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/io/gguf.h"
#include "tessel/io/safetensors_dir.h"
#include "tessel/models/causal_lm.h"

namespace tessel::models {

// Where a Hugging Face checkpoint stores one of tessel's tensors.
struct HfStored {
  std::string name;         // as stored (with or without the family's prefix)
  bool transposed = false;  // the transpose of tessel's 2-D tensor (GPT-2's Conv1D weights)
  // Non-empty: tessel's tensor is these stored tensors stacked along a new first dimension
  // (Mixtral's one tensor per expert for tessel's [experts, out, in]); `name` is then unused.
  std::vector<std::string> stacked;
};

// Where a checkpoint stores each of a model's tensors.
struct HfLayout {
  std::map<std::string, HfStored> tensors;  // by tessel name: every tensor of the state_dict
  // Stored tensors that must hold the same values as one of those (a tied LM head saved beside
  // the embedding): stored name -> tessel name. Loading checks them element by element.
  std::map<std::string, std::string> equal;
};

// Where a GGUF file stores one of tessel's tensors (models/gguf_layout.h).
struct GgufStored {
  std::string name;  // the GGUF tensor name ("blk.0.attn_q.weight")
  // > 0: the stored rows are in Meta's interleaved-RoPE order within each of this many heads
  // (LLaMA's q and k projections and their biases); tessel row r is stored row
  // gguf_stored_row(r, rows, rope_heads). A head's rows stay within the head, so a rank holding
  // whole heads reads only its own heads' stored rows.
  int64_t rope_heads = 0;
  // A mixture of experts' stack that the file keeps as one tensor per expert (older llama.cpp
  // files: blk.N.ffn_gate.E.weight instead of blk.N.ffn_gate_exps.weight): their GGUF names in
  // expert order; empty when the file holds the tensor `name` itself (models/gguf_expert_stack.h).
  std::vector<std::string> experts;
};

// Where a GGUF file stores each of a model's tensors: what a rank needs to read only its pieces.
// Whether a tensor is column-parallel, row-parallel or replicated under tp is the tensor-parallel
// plan's word (ParallelizeResult::spec), the same one the safetensors path reads.
struct GgufLayout {
  std::map<std::string, GgufStored> tensors;  // by tessel name: every tensor of the state_dict
  std::set<std::string> skip;                 // GGUF tensors not loaded (a tied head written twice)
};

class Family {
 public:
  virtual ~Family() = default;
  // tessel's name for it ("gpt2", "llama"): the `--family` value and the docs' heading.
  virtual std::string_view name() const = 0;
  // The Hugging Face `architectures` entries and `model_type` values it reads.
  virtual std::vector<std::string> architectures() const = 0;
  virtual std::vector<std::string> model_types() const = 0;

  // Parses config.json text; `what` names the source in errors.
  virtual ConfigPtr parse_config(const std::string& json_text, const std::string& what) const = 0;
  // Named sizes (e.g. GPT-2's "124M", "tiny"); an Error lists them for an unknown name.
  virtual std::vector<std::string> preset_names() const = 0;
  virtual ConfigPtr preset(const std::string& name) const = 0;

  // The model's tensors as Hugging Face names and layouts (what model.safetensors holds).
  virtual io::NamedTensors to_hf(const CausalLM& model) const = 0;
  // Where `checkpoint` stores each tensor of `model` (whose tensors have the whole model's
  // shapes), after checking names and shapes: one Error lists every missing, unexpected and
  // mis-shaped tensor in HF names and shapes. Reading only some elements of each (a rank's
  // shards) needs nothing more.
  virtual HfLayout hf_layout(const CausalLM& model,
                             const io::SafetensorsCheckpoint& checkpoint) const = 0;
  // Loads HF-layout tensors into `model` whole (f16/bf16 widened to the parameters' dtype),
  // through hf_layout.
  void load_hf(CausalLM& model, const io::SafetensorsCheckpoint& checkpoint) const;
  // The Hugging Face name of a tessel parameter name ("h.0.attn.c_attn.weight" ->
  // "h.0.attn.c_attn.weight" for GPT-2, "layers.0.self_attn.q_proj.weight" ->
  // "model.layers.0.self_attn.q_proj.weight" for LLaMA) and whether HF stores it transposed.
  virtual std::string hf_name(const std::string& name) const = 0;
  virtual bool hf_transposed(const std::string& name) const = 0;

  // The files a model directory of this family uses for its tokenizer, in order of preference.
  virtual std::vector<std::string> tokenizer_files() const = 0;

  // GGUF (the family's <name>_gguf.cpp; models/gguf_model.h has what all families share).
  // The general.architecture value it reads and writes ("gpt2", "llama").
  virtual std::string_view gguf_architecture() const = 0;
  // The config from the file's "<arch>.*" keys (and its tensors' shapes where the keys are
  // optional); an Error names the missing or bad key.
  virtual ConfigPtr config_from_gguf(const io::GgufFile& file) const = 0;
  // The config as "<arch>.*" keys.
  virtual void config_to_gguf(const ModelConfig& config, io::GgufMetadata& out) const = 0;
  // The model's tensors under GGUF names in the layout GGUF stores them (row-major; the writer
  // turns shapes into ggml order), e.g. LLaMA's q/k rows in Meta's interleaved-RoPE order.
  virtual io::NamedTensors to_gguf(const CausalLM& model) const = 0;
  // Loads a GGUF file's tensors into `model` (F16 / BF16 widened to the parameters' dtype).
  virtual void load_gguf(CausalLM& model, const io::GgufFile& file) const = 0;
  // Where `file` stores each tensor of `model` (whose tensors have the whole model's shapes),
  // after checking names and shapes as load_gguf does (one Error lists every missing, unexpected
  // and mis-shaped tensor in GGUF names): what a tensor-parallel rank needs to read only its
  // pieces (train/model_tp_load_gguf.h). The default is an Error naming the family (GPT-2 and
  // LLaMA have one; the mixture-of-experts families have no tensor-parallel plan).
  virtual GgufLayout gguf_layout(const CausalLM& model, const io::GgufFile& file) const;
  // A small dense model of this family, `width` wide with `layers` blocks, `positions` long and
  // without dropout: what measurements of the layers above the kernels run (`tessel plan
  // calibrate`'s overhead probe), without naming a family. The default is an Error naming it.
  virtual ConfigPtr probe_config(int64_t width, int64_t layers, int64_t positions) const;
};

// Every registered family.
const std::vector<const Family*>& families();
// The family named `name` ("gpt2", "llama"); an Error lists the names.
const Family& family_named(std::string_view name);
// The family that reads this config.json text: the first of its "architectures" any family
// lists, else its "model_type", else (neither given, as in GPT-2's original configs) GPT-2; an
// Error names what the file says and lists what is supported.
const Family& family_for_config(const std::string& json_text, const std::string& what);

// config.json (text or a path) -> its family's config.
ConfigPtr parse_model_config(const std::string& json_text, const std::string& what);
ConfigPtr load_model_config(const std::string& config_json_path);
// A preset of any family: "llama:tiny", or a bare name, which is the first registered family's
// that has it (GPT-2 comes first: "tiny" is GPT-2's).
ConfigPtr find_preset(const std::string& name);
bool is_preset(const std::string& name);
// Every preset as "family:name", for help texts and errors.
std::vector<std::string> all_preset_names();

// A model directory in the HF layout: builds the model from DIR/config.json and loads its
// weights (f32 parameters; f16/bf16 files are widened).
std::shared_ptr<CausalLM> load_model(const std::string& dir);
struct SaveOptions {
  uint64_t max_shard_bytes = uint64_t(5) << 30;  // larger models are split with an index
};
// Writes DIR/config.json and the weights (model.safetensors or shards + index), atomically.
void save_model(const CausalLM& model, const std::string& dir, const SaveOptions& options = {});
// The same with the tensors already in Hugging Face names (a family's variant of its layout, e.g.
// GPT-2's "transformer." prefix).
void save_model_tensors(const CausalLM& model, const io::NamedTensors& tensors,
                        const std::string& dir, const SaveOptions& options = {});

}  // namespace tessel::models
