// SPDX-License-Identifier: Apache-2.0
// GPT-2 (Radford et al., "Language Models are Unsupervised Multitask Learners", 2019), computed as
// Hugging Face transformers computes it: token + learned position embeddings, pre-LN blocks with
// tanh GELU, a final LayerNorm, and an LM head tied to the token embedding. Parameter names are
// Hugging Face's without the `transformer.` prefix (wte.weight, h.0.attn.c_attn.weight, ...), with
// weights in tessel's [out, in] layout.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tessel/core/rng.h"
#include "tessel/models/causal_lm.h"
#include "tessel/models/gpt2/gpt2_config.h"
#include "tessel/models/kv_cache.h"
#include "tessel/models/staged_decode.h"
#include "tessel/nn/nn.h"

namespace tessel::models {

class GPT2 : public CausalLM, public StagedDecode {
 public:
  // Random GPT-2 init from `generator` (normal(0, initializer_range), residual projections scaled
  // by 1/sqrt(2 n_layer), zero biases, unit LN scales); nn::Init::none() only allocates, which
  // touches no memory (used to build the big sizes shape-only).
  explicit GPT2(const GPT2Config& config, nn::Init init = {});
  static std::shared_ptr<GPT2> random(const GPT2Config& config, Generator& generator);

  const GPT2Config& config() const { return config_; }
  const ModelConfig& model_config() const override { return config_; }

  // The token-embedding matrix the LM head multiplies with (wte.weight when tied).
  Tensor lm_head_weight() const;
  // Activation recomputation for every block (nn::Recompute); gradients stay bitwise the same.
  void set_recompute(nn::Recompute mode) override;
  void set_block_recompute(int64_t index, nn::Recompute mode) override;
  nn::Recompute recompute() const override { return recompute_; }
  // GPT-2-MoE: the MoE blocks' auxiliary losses and routing of the last forward.
  Tensor auxiliary_loss() const override;
  Tensor block_auxiliary_loss(int64_t block) const override;
  std::vector<ExpertLayerStats> expert_stats() const override;

  // Pipeline layering: wte + wpe and dropout; block i; ln_f and the LM head.
  Tensor embed(const Tensor& ids) override;
  Tensor block(int64_t index, const Tensor& hidden) override;
  Tensor head(const Tensor& hidden) override;
  int64_t layer_of_parameter(const std::string& name) const override;
  std::vector<std::string> head_tied_parameters() const override;
  std::vector<double> layer_costs() const override;
  std::vector<std::string> unit_paths() const override;

  // Cached decoding (gpt2_decode.cpp); see CausalLM::forward_cached.
  Tensor forward_cached(const Tensor& ids, DecodeCache& cache,
                        const Tensor& rows = Tensor()) override;
  KVCache make_cache(int64_t batch, int64_t capacity = 0) const override;
  // Pipelined decoding (models/staged_decode.h).
  Tensor forward_cached_layers(int64_t first, int64_t last, const Tensor& input,
                               DecodeCache& cache) override;
  Tensor cached_head(const Tensor& hidden, const Tensor& rows) override;

  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList> h;
  std::vector<std::shared_ptr<GPT2Block>> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;  // only when tie_word_embeddings is false

 private:
  Tensor lm_logits(const Tensor& x);  // the LM head on normed states, tied or not, quantized or not

  GPT2Config config_;
  nn::Recompute recompute_ = nn::Recompute::None;
  bool warned_attn_pdrop_ = false;
};

}  // namespace tessel::models
