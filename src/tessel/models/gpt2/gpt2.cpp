// SPDX-License-Identifier: Apache-2.0
// The GPT-2 model: embeddings, blocks, final norm and the tied LM head, as pipeline layers.
#include "tessel/models/gpt2/gpt2.h"

#include <string>

#include "tessel/core/log.h"
#include "tessel/ops/ops.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::models {

GPT2::GPT2(const GPT2Config& config, nn::Init init) : CausalLM("GPT2"), config_(config) {
  config_.validate();
  if (init.kind == nn::Init::Random) init.std = config_.initializer_range;
  wte = register_module("wte",
                        std::make_shared<nn::Embedding>(config_.vocab_size, config_.n_embd, init));
  wpe = register_module("wpe",
                        std::make_shared<nn::Embedding>(config_.n_positions, config_.n_embd, init));
  drop = register_module("drop", std::make_shared<nn::Dropout>(config_.embd_pdrop, init.generator));
  h = register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    blocks.push_back(h->append(std::make_shared<GPT2Block>(config_.block_config(i), init)));
  }
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(
                                     config_.n_embd, config_.layer_norm_epsilon, true, init));
  if (!config_.tie_word_embeddings) {
    lm_head = register_module(
        "lm_head", std::make_shared<nn::Linear>(config_.n_embd, config_.vocab_size, false, init));
  }
}

std::shared_ptr<GPT2> GPT2::random(const GPT2Config& config, Generator& generator) {
  return std::make_shared<GPT2>(config, nn::Init::normal(&generator, config.initializer_range));
}

Tensor GPT2::lm_head_weight() const {
  return lm_head ? lm_head->weight : wte->weight;
}

Tensor GPT2::lm_logits(const Tensor& x) {
  // A quantized head (a quantized GGUF) multiplies through its blocks; otherwise the plain product
  // with the matrix, bypassing lm_head's hooks as before.
  if (!lm_head) return wte->project(x);
  return lm_head->quant_type() ? lm_head->forward(x) : ops::linear(x, lm_head->weight);
}

void GPT2::set_recompute(nn::Recompute mode) {
  recompute_ = mode;
  for (auto& block : blocks) block->set_recompute(mode);
}

void GPT2::set_block_recompute(int64_t index, nn::Recompute mode) {
  TESSEL_CHECK(index >= 0 && index < int64_t(blocks.size()), "GPT2: block ", index, " of ",
               blocks.size());
  blocks[size_t(index)]->set_recompute(mode);
}

Tensor GPT2::auxiliary_loss() const {
  Tensor total;
  for (const auto& b : blocks) {
    const Tensor& aux = b->last_aux_loss();
    if (aux.defined()) total = total.defined() ? ops::add(total, aux) : aux;
  }
  return total;
}

Tensor GPT2::block_auxiliary_loss(int64_t block) const {
  TESSEL_CHECK(block >= 0 && block < int64_t(blocks.size()), "GPT2: block ", block,
               " out of range [0, ", blocks.size(), ")");
  return blocks[size_t(block)]->last_aux_loss();
}

std::vector<ExpertLayerStats> GPT2::expert_stats() const {
  std::vector<ExpertLayerStats> out;
  for (size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i]->moe) out.push_back({int64_t(i), blocks[i]->moe->last_stats()});
  return out;
}

Tensor GPT2::embed(const Tensor& ids) {
  if (is_training() && config_.attn_pdrop > 0 && !warned_attn_pdrop_) {
    warned_attn_pdrop_ = true;
    log(LogLevel::Warn, "GPT2: attn_pdrop ", config_.attn_pdrop,
        " is not applied (the fused attention has no dropout on its probabilities); embd_pdrop "
        "and resid_pdrop are");
  }
  Tensor positions = to_device(arange(0, double(ids.size(1)), 1.0, DType::I64), ids.device());
  Tensor x = ops::add(wte->forward(ids), wpe->forward(positions));
  tap("embd", x);
  return drop->forward(x);
}

Tensor GPT2::block(int64_t index, const Tensor& hidden) {
  TESSEL_CHECK(index >= 0 && index < int64_t(blocks.size()), "GPT2.block: index ", index,
               " outside [0, ", blocks.size(), ")");
  return blocks[size_t(index)]->forward(hidden);
}

Tensor GPT2::head(const Tensor& hidden) {
  Tensor logits = lm_logits(ln_f->forward(hidden));
  tap("logits", logits);
  return logits;
}

int64_t GPT2::layer_of_parameter(const std::string& name) const {
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  if (starts("wte.") || starts("wpe.")) return 0;
  if (starts("ln_f.") || starts("lm_head.")) return config_.n_layer + 1;
  if (starts("h.")) {
    const size_t dot = name.find('.', 2);
    const std::string index = name.substr(2, dot == std::string::npos ? dot : dot - 2);
    if (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos &&
        index.size() < 9 && std::stoll(index) < config_.n_layer)
      return 1 + std::stoll(index);
  }
  TESSEL_FAIL("GPT2: parameter '", name, "' belongs to no pipeline layer");
}

std::vector<std::string> GPT2::head_tied_parameters() const {
  if (lm_head) return {};
  return {"wte.weight"};
}

std::vector<std::string> GPT2::unit_paths() const {
  std::vector<std::string> paths;
  for (int64_t i = 0; i < config_.n_layer; ++i) paths.push_back("h." + std::to_string(i));
  paths.push_back("ln_f");
  return paths;
}

std::vector<double> GPT2::layer_costs() const {
  // Weights each layer's forward multiplies with: none for the lookups, a block's parameters,
  // and the LM head matrix (the tied wte when tied) plus ln_f. The head counts the rows this
  // model holds, as the blocks count theirs: under tensor parallelism its vocabulary piece, so a
  // pipeline cut of tp's pieces weighs the head as it weighs the blocks (the whole head against
  // halved blocks cut GPT-2 124M at tp 2 x pp 2 after block 10, the whole model after block 8).
  std::vector<double> costs{0.0};
  for (const auto& b : blocks) costs.push_back(double(b->parameter_count()));
  const Tensor head = lm_head_weight();
  const int64_t rows = head.defined() && head.ndim() == 2 ? head.size(0) : config_.vocab_size;
  costs.push_back(double(rows * config_.n_embd) + double(ln_f->parameter_count()));
  return costs;
}

}  // namespace tessel::models
