// SPDX-License-Identifier: Apache-2.0
// The GPT-2 model: embeddings, blocks, final norm, tied LM head, loss, greedy decoding and the
// TESSEL_DUMP_DIR activation dump.
#include "tessel/models/gpt2.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/log.h"
#include "tessel/io/safetensors.h"
#include "tessel/ops/ops.h"

namespace tessel::models {

GPT2::GPT2(const GPT2Config& config, nn::Init init) : Module("GPT2"), config_(config) {
  config_.validate();
  if (init.kind == nn::Init::Random) init.std = config_.initializer_range;
  wte = register_module("wte",
                        std::make_shared<nn::Embedding>(config_.vocab_size, config_.n_embd, init));
  wpe = register_module("wpe",
                        std::make_shared<nn::Embedding>(config_.n_positions, config_.n_embd, init));
  drop = register_module("drop", std::make_shared<nn::Dropout>(config_.embd_pdrop, init.generator));
  h = register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    blocks.push_back(h->append(std::make_shared<nn::Block>(config_.block_config(), init)));
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

void GPT2::set_recompute(nn::Recompute mode) {
  recompute_ = mode;
  for (auto& block : blocks) block->set_recompute(mode);
}

Tensor GPT2::forward_impl(const Tensor& ids) {
  TESSEL_CHECK(ids.ndim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
               "GPT2.forward: ids ", ids.shape(), " ", dtype_name(ids.dtype()),
               " expected i32/i64 [B, T]");
  const int64_t t = ids.size(1);
  TESSEL_CHECK(t >= 1 && t <= config_.n_positions, "GPT2.forward: sequence length ", t,
               " outside [1, n_positions = ", config_.n_positions, "]");
  if (is_training() && config_.attn_pdrop > 0 && !warned_attn_pdrop_) {
    warned_attn_pdrop_ = true;
    log(LogLevel::Warn, "GPT2: attn_pdrop ", config_.attn_pdrop,
        " is not applied (the fused attention has no dropout on its probabilities); embd_pdrop "
        "and resid_pdrop are");
  }
  Tensor positions = arange(0, double(t), 1.0, DType::I64);
  Tensor x = ops::add(wte->forward(ids), wpe->forward(positions));
  tap("embd", x);
  x = drop->forward(x);
  for (auto& block : blocks) x = block->forward(x);
  x = ln_f->forward(x);
  Tensor logits = ops::linear(x, lm_head_weight());
  tap("logits", logits);
  return logits;
}

Tensor GPT2::forward(const Tensor& ids) {
  const char* dir = std::getenv("TESSEL_DUMP_DIR");
  if (dir == nullptr || *dir == '\0') {
    return run_forward({ids}, [&] { return forward_impl(ids); });
  }
  // Collect copies of every named intermediate, then write them as one safetensors file.
  io::NamedTensors dumped;
  std::set<std::string> seen;
  int64_t handle = add_activation_observer([&](const std::string& name, const Tensor& value) {
    if (!value.defined() || !dtype_is_float(value.dtype()) || !seen.insert(name).second) return;
    dumped.emplace_back(name, value.detach().clone());
  });
  Tensor out;
  try {
    out = run_forward({ids}, [&] { return forward_impl(ids); });
  } catch (...) {
    remove_hook(handle);
    throw;
  }
  remove_hook(handle);
  std::filesystem::create_directories(dir);
  char file[64];
  std::snprintf(file, sizeof(file), "activations-%04lld.safetensors", (long long)dump_count_++);
  io::save_safetensors((std::filesystem::path(dir) / file).string(), dumped);
  return out;
}

Tensor GPT2::loss(const Tensor& ids, const Tensor& targets) {
  TESSEL_CHECK(targets.shape() == ids.shape(), "GPT2.loss: targets ", targets.shape(),
               " expected the shape of ids ", ids.shape());
  Tensor logits = forward(ids);
  const int64_t n = ids.numel();
  return ops::cross_entropy(ops::reshape(logits, {n, config_.vocab_size}), targets.reshape({n}));
}

std::vector<int64_t> GPT2::generate_greedy(const std::vector<int64_t>& prompt, int64_t steps) {
  TESSEL_CHECK(!prompt.empty(), "GPT2.generate_greedy: empty prompt");
  TESSEL_CHECK(int64_t(prompt.size()) <= config_.n_positions, "GPT2.generate_greedy: prompt of ",
               prompt.size(), " tokens is longer than n_positions ", config_.n_positions);
  TESSEL_CHECK(steps >= 0, "GPT2.generate_greedy: steps ", steps, " must be >= 0");
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> ids = prompt, out;
  for (int64_t s = 0; s < steps; ++s) {
    // Past the context length the window slides: the model sees the last n_positions tokens.
    const int64_t t = std::min<int64_t>(int64_t(ids.size()), config_.n_positions);
    std::vector<int64_t> window(ids.end() - t, ids.end());
    Tensor logits = forward(from_data(window, Shape{1, t}));
    Tensor last = logits.narrow(1, t - 1, 1).to(DType::F32);
    const float* p = last.data<float>();
    int64_t best = 0;
    for (int64_t v = 1; v < config_.vocab_size; ++v) {
      if (p[v] > p[best]) best = v;  // the first maximum wins, as in torch.argmax
    }
    ids.push_back(best);
    out.push_back(best);
  }
  return out;
}

}  // namespace tessel::models
