// SPDX-License-Identifier: Apache-2.0
// GPT-2-MoE as a model family ("gpt2-moe"): GPT-2 with DeepSpeed-MoE's expert blocks
// (gpt2_moe.h). Hugging Face has no such architecture; its checkpoints use GPT-2's layout (Conv1D
// weights transposed) for the dense tensors and tessel's names for the experts, stacked
// ([experts, out, in]): h.N.moe.router.weight, h.N.moe.experts.{fc_weight, fc_bias, proj_weight,
// proj_bias}, and PR-MoE's h.N.moe.dense.{c_fc, c_proj}.{weight, bias} as they are held.
#include <memory>

#include "tessel/core/error.h"
#include "tessel/models/family.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/gpt2/gpt2_checkpoint.h"

namespace tessel::models {

namespace {

GPT2& as_gpt2_moe(const CausalLM& model) {
  const auto* m = dynamic_cast<const GPT2*>(&model);
  TESSEL_CHECK(m != nullptr && m->config().moe.enabled(), "GPT-2-MoE family: model '",
               model.type_name(), "' is not a GPT-2-MoE");
  return const_cast<GPT2&>(*m);
}

// GPT-2 tiny (4 x 192, GPT-2's tokenizer) with 4 GELU experts in blocks 1 and 3, top-1 (Switch
// gates), capacity factor 1.25: the same FLOPs per token as GPT-2 tiny.
GPT2Config tiny() {
  GPT2Config c = GPT2Config::preset("tiny");
  c.moe.num_experts = 4;
  c.moe.top_k = 1;
  c.moe.moe_every = 2;
  c.moe.capacity_factor = 1.25;
  return c;
}

class GPT2MoEFamily final : public Family {
 public:
  std::string_view name() const override { return "gpt2-moe"; }
  std::vector<std::string> architectures() const override { return {"GPT2MoELMHeadModel"}; }
  std::vector<std::string> model_types() const override { return {"gpt2_moe"}; }
  ConfigPtr parse_config(const std::string& json_text, const std::string& what) const override {
    GPT2Config c = GPT2Config::from_json(json_text, what);
    TESSEL_CHECK(c.moe.enabled(), what, ": describes a dense GPT-2, not a GPT2MoELMHeadModel");
    return std::make_shared<GPT2Config>(c);
  }
  std::vector<std::string> preset_names() const override { return {"tiny", "tiny-pr"}; }
  ConfigPtr preset(const std::string& name) const override {
    GPT2Config c = tiny();
    if (name == "tiny-pr") {
      // PR-MoE: a pyramid (more experts in the last block) in the residual form.
      c.moe.expert_counts = {0, 2, 0, 4};
      c.moe.residual = true;
    } else {
      TESSEL_CHECK(name == "tiny", "GPT-2-MoE preset '", name,
                   "' is unknown (presets: tiny, tiny-pr)");
    }
    c.validate();
    return std::make_shared<GPT2Config>(c);
  }
  io::NamedTensors to_hf(const CausalLM& model) const override {
    return gpt2_to_hf(as_gpt2_moe(model));
  }
  HfLayout hf_layout(const CausalLM& model,
                     const io::SafetensorsCheckpoint& checkpoint) const override {
    return gpt2_hf_layout(as_gpt2_moe(model), checkpoint);
  }
  std::string hf_name(const std::string& name) const override { return name; }
  bool hf_transposed(const std::string& name) const override { return gpt2_is_conv1d_weight(name); }
  std::vector<std::string> tokenizer_files() const override {
    return {"tokenizer.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe"};
  }
  std::string_view gguf_architecture() const override { return "gpt2-moe"; }
  ConfigPtr config_from_gguf(const io::GgufFile& file) const override {
    TESSEL_FAIL(file.path(), ": GGUF is not supported for the GPT-2-MoE family");
  }
  void config_to_gguf(const ModelConfig&, io::GgufMetadata&) const override {
    TESSEL_FAIL("GGUF export is not supported for the GPT-2-MoE family");
  }
  io::NamedTensors to_gguf(const CausalLM&) const override {
    TESSEL_FAIL("GGUF export is not supported for the GPT-2-MoE family");
  }
  void load_gguf(CausalLM&, const io::GgufFile& file) const override {
    TESSEL_FAIL(file.path(), ": GGUF is not supported for the GPT-2-MoE family");
  }
};

}  // namespace

const Family& gpt2_moe_family() {
  static const GPT2MoEFamily family;
  return family;
}

}  // namespace tessel::models
