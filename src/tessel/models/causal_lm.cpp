// SPDX-License-Identifier: Apache-2.0
// What every causal LM shares: the forward as embedding, blocks and head in order, the loss, the
// TESSEL_DUMP_DIR activation dump and greedy decoding by recomputation.
#include "tessel/models/causal_lm.h"

#include "tessel/autograd/grad_mode.h"
#include "tessel/models/activation_dump.h"
#include "tessel/ops/ops.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::models {

TensorParallelSpec inference_tensor_parallel(const ModelConfig& config, int tp) {
  TensorParallelSpec spec = config.tensor_parallel(tp);
  if (!config.has_experts() || tp <= 1) return spec;
  // Each expert's FFN columns are split over tp as --etp splits them in training (the balanced
  // uneven rule: 33 columns over 2 are 17 + 16), so every rank needs one column of every layer.
  // Built shape-only: the layers' configs are all that is read.
  nn::init::InitRecord unused;
  std::shared_ptr<CausalLM> model;
  {
    nn::init::DeferInit defer(unused);
    model = config.build_empty();
  }
  for (const auto& [name, module] : model->named_modules()) {
    const auto* moe = dynamic_cast<const nn::MoE*>(module);
    TESSEL_CHECK(moe == nullptr || moe->config().ffn_hidden >= tp,
                 "tensor parallelism: ", config.summary(), ": layer '", name,
                 "' has experts of width ", moe ? moe->config().ffn_hidden : 0, ", which --tp ", tp,
                 " ranks cannot split (each rank holds a piece of every expert's FFN columns and "
                 "needs one)");
  }
  return spec;
}

void set_rank_recompute(CausalLM& model, nn::Recompute mode, int64_t count,
                        const std::vector<int64_t>& blocks, nn::Recompute rest) {
  if (count == nn::kAllBlocks) {
    model.set_recompute(mode);
    return;
  }
  TESSEL_CHECK(count >= 0 && count <= int64_t(blocks.size()), "recompute ",
               nn::recompute_name(mode), ":", count, " names more blocks than the ", blocks.size(),
               " this rank runs");
  model.set_recompute(rest);
  for (int64_t i = 0; i < count; ++i) model.set_block_recompute(blocks[size_t(i)], mode);
}

Tensor CausalLM::trunk(const Tensor& ids) {
  TESSEL_CHECK(ids.ndim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
               type_name(), ".forward: ids ", ids.shape(), " ", dtype_name(ids.dtype()),
               " expected i32/i64 [B, T]");
  const int64_t t = ids.size(1), limit = model_config().max_positions();
  TESSEL_CHECK(t >= 1 && t <= limit, type_name(), ".forward: sequence length ", t,
               " outside [1, max_positions = ", limit, "]");
  Tensor x = embed(ids);
  for (int64_t i = 0; i < num_layers(); ++i) x = block(i, x);
  return x;
}

Tensor CausalLM::forward_layers(const Tensor& ids) {
  return head(trunk(ids));
}

Tensor CausalLM::forward(const Tensor& ids) {
  const std::optional<std::string> dir = ActivationDump::directory();
  if (!dir) return run_forward({ids}, [&] { return forward_layers(ids); });
  // Collect copies of every named intermediate, then write them as one safetensors file.
  ActivationDump dump(*this);
  Tensor out = run_forward({ids}, [&] { return forward_layers(ids); });
  dump.write(*dir, dump_count_++);
  return out;
}

Device CausalLM::device() const {
  const nn::NamedTensors params = named_parameters();
  return params.empty() ? Device::cpu() : params.front().second.device();
}

Tensor CausalLM::loss(const Tensor& ids, const Tensor& targets) {
  TESSEL_CHECK(targets.shape() == ids.shape(), type_name(), ".loss: targets ", targets.shape(),
               " expected the shape of ids ", ids.shape());
  Tensor logits = forward(ids);
  const int64_t n = ids.numel();
  return ops::cross_entropy(ops::reshape(logits, {n, logits.size(int(logits.ndim()) - 1)}),
                            targets.reshape({n}));
}

Tensor CausalLM::forward_step(const Tensor& ids, KVCache& cache, bool last_only) {
  TESSEL_CHECK(ids.ndim() == 2, type_name(), ".forward_step: ids ", ids.shape(),
               " expected [B, T]");
  const int64_t b = ids.size(0), t = ids.size(1);
  Tensor rows;
  if (last_only && ids.device().is_meta()) {
    // Shape-only (the planner's serving memory trace): the same [B] index tensor, no values.
    rows = empty({b}, DType::I64, ids.device());
  } else if (last_only) {
    std::vector<int64_t> last(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) last[size_t(i)] = i * t + t - 1;
    rows = to_device(from_data(last, Shape{b}), ids.device());
  }
  Tensor logits = forward_cached(ids, cache, rows);
  cache.advance(t);
  return last_only ? logits.reshape({b, 1, logits.size(1)}) : logits;
}

Tensor CausalLM::select_tokens(const Tensor& hidden, const Tensor& rows) {
  if (!rows.defined()) return hidden;
  TESSEL_CHECK(hidden.ndim() == 3 && rows.ndim() == 1 && rows.dtype() == DType::I64,
               "select_tokens: hidden ", hidden.shape(), " and rows ", rows.shape(), " ",
               dtype_name(rows.dtype()), " expected [B, T, C] and i64 [R]");
  const int64_t tokens = hidden.size(0) * hidden.size(1);
  // On a CUDA device the gather kernel checks the rows (and names a bad one).
  if (!rows.device().is_cpu())
    return ops::embedding(hidden.reshape({tokens, hidden.size(2)}), rows);
  const int64_t* r = rows.data<int64_t>();
  for (int64_t i = 0; i < rows.numel(); ++i)
    TESSEL_CHECK(r[i] >= 0 && r[i] < tokens, "select_tokens: row ", r[i], " outside [0, ", tokens,
                 ")");
  // A row gather is an embedding lookup into the flattened tokens.
  return ops::embedding(hidden.reshape({tokens, hidden.size(2)}), rows);
}

std::vector<int64_t> CausalLM::generate_greedy(const std::vector<int64_t>& prompt, int64_t steps) {
  const int64_t limit = model_config().max_positions();
  TESSEL_CHECK(!prompt.empty(), type_name(), ".generate_greedy: empty prompt");
  TESSEL_CHECK(int64_t(prompt.size()) <= limit, type_name(), ".generate_greedy: prompt of ",
               prompt.size(), " tokens is longer than max_positions ", limit);
  TESSEL_CHECK(steps >= 0, type_name(), ".generate_greedy: steps ", steps, " must be >= 0");
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> ids = prompt, out;
  for (int64_t s = 0; s < steps; ++s) {
    // Past the context length the window slides: the model sees the last max_positions tokens.
    const int64_t t = std::min<int64_t>(int64_t(ids.size()), limit);
    std::vector<int64_t> window(ids.end() - t, ids.end());
    Tensor logits = forward(from_data(window, Shape{1, t}));
    Tensor last = logits.narrow(1, t - 1, 1).to(DType::F32);
    const float* p = last.data<float>();
    const int64_t vocab = last.numel();
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v) {
      if (p[v] > p[best]) best = v;  // the first maximum wins, as in torch.argmax
    }
    ids.push_back(best);
    out.push_back(best);
  }
  return out;
}

}  // namespace tessel::models
