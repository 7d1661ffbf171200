// SPDX-License-Identifier: Apache-2.0
// GPT-2 as a model family: Hugging Face's GPT2LMHeadModel, its presets, its tensor names (Conv1D
// weights stored [in, out]), its built modules and its tensor-parallel plan (Megatron-LM's).
#include <memory>
#include <string>

#include "tessel/core/error.h"
#include "tessel/models/family.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/gpt2/gpt2_checkpoint.h"
#include "tessel/models/gpt2/gpt2_gguf.h"

namespace tessel::models {

namespace {

// GPT-2's tensor-parallel plan (configs/gpt2-tp.json has the same text): the tied embedding split
// by vocabulary, qkv per head, Colwise then Rowwise in attention and MLP; with sequence
// parallelism the norms, dropouts and residuals run on sequence pieces.
constexpr const char* kPlan = R"({
  "# about": "GPT-2's tensor-parallel plan (Megatron-LM): vocab-split tied embedding, per-head qkv, Colwise then Rowwise in attention and MLP; with --sp the norms, dropouts and residuals run on sequence pieces",
  "wte": "VocabParallel",
  "wpe": "Sequence",
  "drop": "Sequence",
  "h.*.ln_1": "Sequence",
  "h.*.attn.c_attn": {"style": "Colwise", "blocks": 3, "unit": "head_dim"},
  "h.*.attn.c_proj": "Rowwise",
  "h.*.attn.resid_dropout": "Sequence",
  "h.*.ln_2": "Sequence",
  "h.*.mlp.c_fc": "Colwise",
  "h.*.mlp.c_proj": "Rowwise",
  "h.*.mlp.dropout": "Sequence",
  "ln_f": {"style": "Sequence", "gather_output": true}
}
)";

const GPT2& as_gpt2(const CausalLM& model) {
  const auto* m = dynamic_cast<const GPT2*>(&model);
  TESSEL_CHECK(m != nullptr, "GPT-2 family: model '", model.type_name(), "' is not a GPT-2");
  return *m;
}

class GPT2Family final : public Family {
 public:
  std::string_view name() const override { return "gpt2"; }
  std::vector<std::string> architectures() const override {
    return {"GPT2LMHeadModel", "GPT2Model"};
  }
  std::vector<std::string> model_types() const override { return {"gpt2"}; }
  ConfigPtr parse_config(const std::string& json_text, const std::string& what) const override {
    return std::make_shared<GPT2Config>(GPT2Config::from_json(json_text, what));
  }
  std::vector<std::string> preset_names() const override { return GPT2Config::preset_names(); }
  ConfigPtr preset(const std::string& name) const override {
    return std::make_shared<GPT2Config>(GPT2Config::preset(name));
  }
  io::NamedTensors to_hf(const CausalLM& model) const override {
    return gpt2_to_hf(as_gpt2(model));
  }
  HfLayout hf_layout(const CausalLM& model,
                     const io::SafetensorsCheckpoint& checkpoint) const override {
    return gpt2_hf_layout(as_gpt2(model), checkpoint);
  }
  std::string hf_name(const std::string& name) const override { return name; }
  bool hf_transposed(const std::string& name) const override { return gpt2_is_conv1d_weight(name); }
  std::vector<std::string> tokenizer_files() const override {
    return {"tokenizer.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe"};
  }
  std::string_view gguf_architecture() const override { return "gpt2"; }
  ConfigPtr config_from_gguf(const io::GgufFile& file) const override {
    return gpt2_config_from_gguf(file);
  }
  void config_to_gguf(const ModelConfig& config, io::GgufMetadata& out) const override {
    gpt2_config_to_gguf(config, out);
  }
  io::NamedTensors to_gguf(const CausalLM& model) const override { return gpt2_to_gguf(model); }
  void load_gguf(CausalLM& model, const io::GgufFile& file) const override {
    gpt2_load_gguf(model, file);
  }
  GgufLayout gguf_layout(const CausalLM& model, const io::GgufFile& file) const override {
    return gpt2_gguf_layout(model, file);
  }
  ConfigPtr probe_config(int64_t width, int64_t layers, int64_t positions) const override {
    GPT2Config c;
    c.vocab_size = 64;
    c.n_positions = positions;
    c.n_embd = width;
    c.n_layer = layers;
    c.n_head = 2;
    c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
    c.validate();
    return std::make_shared<GPT2Config>(c);
  }
};

}  // namespace

const Family& gpt2_family() {
  static const GPT2Family family;
  return family;
}

const Family& gpt2_moe_family();  // gpt2_moe_family.cpp

const Family& GPT2Config::family() const {
  return moe.enabled() ? gpt2_moe_family() : gpt2_family();
}

std::shared_ptr<CausalLM> GPT2Config::build_random(Generator& generator) const {
  return std::make_shared<GPT2>(*this, nn::Init::normal(&generator, initializer_range));
}

std::shared_ptr<CausalLM> GPT2Config::build_empty(Generator* dropout_generator) const {
  nn::Init init = nn::Init::none();
  init.generator = dropout_generator;
  return std::make_shared<GPT2>(*this, init);
}

TensorParallelSpec GPT2Config::tensor_parallel(int tp) const {
  TESSEL_CHECK(tp >= 1, "tensor parallelism: tp = ", tp, " must be >= 1");
  // GPT-2-MoE: the plan splits attention and the dense blocks' MLPs; no rule matches an MoE
  // block's router and experts, which every tp rank holds whole (docs/MOE.md, "ep with tp").
  TESSEL_CHECK(n_head % tp == 0, "tensor parallelism: GPT-2's n_head = ", n_head,
               " is not divisible by tp = ", tp, " (attention is split per head)");
  TESSEL_CHECK(tie_word_embeddings,
               "tensor parallelism: GPT-2 with an untied lm_head is not supported (the plan "
               "splits the tied wte by vocabulary)");
  TensorParallelSpec spec;
  spec.plan_json = kPlan;
  // An MoE block's output dropout runs on its sequence piece like the MLP's (the MoE layer gathers
  // the pieces and keeps its own: parallel/expert/expert_sequence_parallel.h).
  if (has_experts()) {
    spec.plan_json = std::string(kPlan);
    spec.plan_json.insert(spec.plan_json.find("  \"ln_f\""),
                          "  \"h.*.moe_dropout\": \"Sequence\",\n");
  }
  spec.sizes = {{"head_dim", n_embd / n_head}, {"n_embd", n_embd}, {"n_head", n_head}};
  spec.vocab_parallel_weight = "wte.weight";
  spec.head_region_entry = "ln_f";
  return spec;
}

}  // namespace tessel::models
