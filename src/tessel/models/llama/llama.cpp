// SPDX-License-Identifier: Apache-2.0
// The LLaMA model: embedding, decoder layers, final norm and LM head, the pipeline layering, and
// LlamaConfig's module builders.
#include "tessel/models/llama/llama.h"

#include "tessel/core/error.h"
#include "tessel/ops/ops.h"

namespace tessel::models {

Llama::Llama(const LlamaConfig& config, nn::Init init)
    : CausalLM("Llama"), config_(config), rope_(std::make_shared<RotaryTables>(config)) {
  config_.validate();
  if (init.kind == nn::Init::Random) init.std = config_.initializer_range;
  embed_tokens = register_module(
      "embed_tokens", std::make_shared<nn::Embedding>(config_.vocab_size, config_.hidden, init));
  layers = register_module("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i)
    decoder_layers.push_back(
        layers->append(std::make_shared<LlamaDecoderLayer>(config_, rope_, init)));
  norm = register_module("norm",
                         std::make_shared<nn::RMSNorm>(config_.hidden, config_.rms_norm_eps, init));
  if (!config_.tie_word_embeddings) {
    lm_head = register_module(
        "lm_head", std::make_shared<nn::Linear>(config_.hidden, config_.vocab_size, false, init));
  }
  for (const auto& [name, p] : named_parameters()) parameter_names_.insert(name);
}

std::shared_ptr<Llama> Llama::random(const LlamaConfig& config, Generator& generator) {
  return std::make_shared<Llama>(config, nn::Init::normal(&generator, config.initializer_range));
}

Tensor Llama::lm_head_weight() const {
  return lm_head ? lm_head->weight : embed_tokens->weight;
}

void Llama::set_recompute(nn::Recompute mode) {
  recompute_ = mode;
  for (auto& layer : decoder_layers) layer->set_recompute(mode);
}

void Llama::set_block_recompute(int64_t index, nn::Recompute mode) {
  TESSEL_CHECK(index >= 0 && index < int64_t(decoder_layers.size()), "Llama: layer ", index, " of ",
               decoder_layers.size());
  decoder_layers[size_t(index)]->set_recompute(mode);
}

Tensor Llama::auxiliary_loss() const {
  Tensor total;
  for (const auto& layer : decoder_layers) {
    const Tensor& aux = layer->last_aux_loss();
    if (aux.defined()) total = total.defined() ? ops::add(total, aux) : aux;
  }
  return total;
}

Tensor Llama::block_auxiliary_loss(int64_t block) const {
  TESSEL_CHECK(block >= 0 && block < int64_t(decoder_layers.size()), "Llama: block ", block,
               " out of range [0, ", decoder_layers.size(), ")");
  return decoder_layers[size_t(block)]->last_aux_loss();
}

std::vector<ExpertLayerStats> Llama::expert_stats() const {
  std::vector<ExpertLayerStats> out;
  for (size_t i = 0; i < decoder_layers.size(); ++i)
    if (decoder_layers[i]->block_sparse_moe)
      out.push_back({int64_t(i), decoder_layers[i]->block_sparse_moe->last_stats()});
  return out;
}

Tensor Llama::embed(const Tensor& ids) {
  TESSEL_CHECK(ids.ndim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
               "Llama.embed: ids ", ids.shape(), " ", dtype_name(ids.dtype()),
               " expected i32/i64 [B, T]");
  Tensor x = embed_tokens->forward(ids);
  tap("embed", x);
  return x;
}

Tensor Llama::block(int64_t index, const Tensor& hidden) {
  TESSEL_CHECK(index >= 0 && index < int64_t(decoder_layers.size()), "Llama.block: index ", index,
               " outside [0, ", decoder_layers.size(), ")");
  return decoder_layers[size_t(index)]->forward(hidden);
}

Tensor Llama::logits(const Tensor& normed) {
  // Through lm_head's module, so that a tensor-parallel style on it applies; the tied head
  // multiplies with the embedding's (possibly vocab-split) rows.
  return lm_head ? lm_head->forward(normed) : embed_tokens->project(normed);
}

Tensor Llama::head(const Tensor& hidden) {
  return logits(norm->forward(hidden));
}

int64_t Llama::layer_of_parameter(const std::string& name) const {
  TESSEL_CHECK(parameter_names_.count(name) != 0, "Llama: no parameter named '", name, "'");
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  if (starts("embed_tokens.")) return 0;
  if (starts("norm.") || starts("lm_head.")) return config_.num_hidden_layers + 1;
  // "layers.<i>.": the name exists, so <i> is a valid index.
  const size_t dot = name.find('.', 7);
  return 1 + std::stoll(name.substr(7, dot - 7));
}

std::vector<std::string> Llama::head_tied_parameters() const {
  if (lm_head) return {};
  return {"embed_tokens.weight"};
}

std::vector<std::string> Llama::unit_paths() const {
  std::vector<std::string> paths;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i)
    paths.push_back("layers." + std::to_string(i));
  paths.push_back("norm");
  if (lm_head) paths.push_back("lm_head");
  return paths;
}

std::vector<double> Llama::layer_costs() const {
  // Weights each layer's forward multiplies with: none for the lookup, a decoder layer's
  // parameters, the head's matrix (the embedding when tied) and the norm. The head counts the
  // rows this model holds (under tensor parallelism its vocabulary piece), as the layers do.
  std::vector<double> costs{0.0};
  for (const auto& layer : decoder_layers) costs.push_back(double(layer->parameter_count()));
  const Tensor head = lm_head_weight();
  const int64_t rows = head.defined() && head.ndim() == 2 ? head.size(0) : config_.vocab_size;
  costs.push_back(double(rows * config_.hidden) + double(norm->parameter_count()));
  return costs;
}

std::shared_ptr<CausalLM> LlamaConfig::build_random(Generator& generator) const {
  return Llama::random(*this, generator);
}

std::shared_ptr<CausalLM> LlamaConfig::build_empty(Generator* dropout_generator) const {
  (void)dropout_generator;  // the LLaMA family has no dropout
  return std::make_shared<Llama>(*this, nn::Init::none());
}

}  // namespace tessel::models
