// SPDX-License-Identifier: Apache-2.0
// The LLaMA family's causal LM (Touvron et al. 2023, "LLaMA"; Llama 2 / 3; Mistral 7B; Qwen2),
// computed as Hugging Face transformers computes LlamaForCausalLM, MistralForCausalLM and
// Qwen2ForCausalLM: token embedding, pre-norm decoder layers (llama_block.h), a final RMSNorm
// and an LM head, tied to the embedding or its own. Parameter names are Hugging Face's without
// the "model." prefix (embed_tokens.weight, layers.0.self_attn.q_proj.weight, ..., norm.weight,
// and lm_head.weight as HF names it), weights in tessel's [out, in] layout, which is HF's.
//
// Pipeline layering: layer 0 the embedding, 1..L the decoder layers, L + 1 the norm and the head.
// Initialisation from a Generator (bit-reproducible): normal(0, initializer_range) for every
// Linear and the embedding, ones for the norms, zeros for biases.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tessel/models/causal_lm.h"
#include "tessel/models/llama/llama_block.h"
#include "tessel/models/llama/llama_config.h"
#include "tessel/models/llama/llama_rope.h"
#include "tessel/models/staged_decode.h"
#include "tessel/nn/nn.h"

namespace tessel::models {

class Llama : public CausalLM, public StagedDecode {
 public:
  // nn::Init::none() only allocates (build_empty); a Random init's std is replaced by the
  // config's initializer_range.
  explicit Llama(const LlamaConfig& config, nn::Init init = {});
  static std::shared_ptr<Llama> random(const LlamaConfig& config, Generator& generator);

  const LlamaConfig& config() const { return config_; }
  const ModelConfig& model_config() const override { return config_; }

  Tensor embed(const Tensor& ids) override;
  Tensor block(int64_t index, const Tensor& hidden) override;
  Tensor head(const Tensor& hidden) override;
  int64_t layer_of_parameter(const std::string& name) const override;
  std::vector<std::string> head_tied_parameters() const override;
  // "layers.0" .. "layers.<L-1>", "norm", and "lm_head" when untied (its own ZeRO-3 unit: the
  // largest matrix of most models, used only by the head's forward).
  std::vector<std::string> unit_paths() const override;
  std::vector<double> layer_costs() const override;

  void set_recompute(nn::Recompute mode) override;
  void set_block_recompute(int64_t index, nn::Recompute mode) override;
  nn::Recompute recompute() const override { return recompute_; }
  // Mixtral: the decoder layers' MoE auxiliary losses and routing of the last forward.
  Tensor auxiliary_loss() const override;
  Tensor block_auxiliary_loss(int64_t block) const override;
  std::vector<ExpertLayerStats> expert_stats() const override;

  // Incremental decoding (llama_decode.cpp). The cache holds this model's KV heads (this rank's
  // under tensor parallelism), keys after their rotation; a sliding window is applied to the
  // cached keys as to a whole sequence.
  Tensor forward_cached(const Tensor& ids, DecodeCache& cache,
                        const Tensor& rows = Tensor()) override;
  KVCache make_cache(int64_t batch, int64_t capacity = 0) const override;
  // Pipelined decoding (models/staged_decode.h).
  Tensor forward_cached_layers(int64_t first, int64_t last, const Tensor& input,
                               DecodeCache& cache) override;
  Tensor cached_head(const Tensor& hidden, const Tensor& rows) override;

  // The matrix the LM head multiplies with (embed_tokens.weight when tied).
  Tensor lm_head_weight() const;

  std::shared_ptr<nn::Embedding> embed_tokens;
  std::shared_ptr<nn::ModuleList> layers;
  std::vector<std::shared_ptr<LlamaDecoderLayer>> decoder_layers;
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<nn::Linear> lm_head;  // only when tie_word_embeddings is false

 private:
  Tensor logits(const Tensor& normed);
  LlamaConfig config_;
  std::shared_ptr<RotaryTables> rope_;
  nn::Recompute recompute_ = nn::Recompute::None;
  std::set<std::string> parameter_names_;
};

}  // namespace tessel::models
