// SPDX-License-Identifier: Apache-2.0
// A model's tensor-parallel glue: the family's plan, the padded vocabulary, the vocab-parallel
// loss, gathered and sliced checkpoints, and the gradient reductions over tp.
#include "tessel/train/model_tensor_parallel.h"

#include <cmath>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/ops/shape.h"
#include "tessel/parallel/vocab_parallel.h"
#include "tessel/sharding/regions.h"
#include "tessel/train/grad_clip.h"

namespace tessel::train {

namespace {

// The sharded parameter a (possibly optimizer-prefixed) name refers to, or null.
const parallel::ShardSpec* spec_of(const ModelTensorParallel& tp, const std::string& name) {
  for (const char* prefix : {"", "exp_avg.", "exp_avg_sq."}) {
    const std::string p = prefix;
    if (name.compare(0, p.size(), p) != 0) continue;
    if (const parallel::ShardSpec* s = tp.result.spec(name.substr(p.size()))) return s;
  }
  return nullptr;
}

}  // namespace

ModelTensorParallel parallelize_model(models::CausalLM& model, dist::CommPtr tp,
                                      const std::string& plan_path, bool sequence_parallel,
                                      const std::function<void(const std::string&)>& note) {
  TESSEL_CHECK(tp != nullptr, "parallelize_model: the tensor-parallel communicator is null");
  const models::ModelConfig& c = model.model_config();
  const int n = tp->size();
  const models::TensorParallelSpec spec = c.tensor_parallel(n);
  const parallel::ParallelPlan plan =
      plan_path.empty() ? parallel::ParallelPlan::parse(spec.plan_json, "built-in " + c.summary())
                        : parallel::ParallelPlan::load(plan_path);
  parallel::ParallelizeOptions po;
  po.sequence_parallel = sequence_parallel;
  for (const auto& [name, value] : spec.sizes) po.sizes[name] = value;
  ModelTensorParallel out;
  out.tp = tp;
  out.vocab = c.vocabulary_size();
  out.padded_vocab = parallel::padded_vocab_size(c.vocabulary_size(), n);
  out.sequence_parallel = sequence_parallel;
  out.result = parallel::parallelize(model, tp, plan, po);
  const parallel::ShardSpec* embedding = out.result.spec(spec.vocab_parallel_weight);
  TESSEL_CHECK(embedding != nullptr && out.result.applied.size() > 0,
               "tensor parallelism: the plan must split ", spec.vocab_parallel_weight,
               " with VocabParallel (the LM head multiplies with its rows)");
  out.vocab_offset = int64_t(tp->rank()) * (out.padded_vocab / n);
  if (out.padded_vocab != out.vocab && note) {
    note("tensor parallel: vocabulary " + std::to_string(out.vocab) + " padded to " +
         std::to_string(out.padded_vocab) + " (a multiple of tp = " + std::to_string(n) +
         "); the padding rows are zeros, left out of the loss and of sampling");
  }
  return out;
}

Tensor model_tp_loss(models::CausalLM& model, const ModelTensorParallel& tp, const Tensor& ids,
                     const Tensor& targets) {
  TESSEL_CHECK(targets.shape() == ids.shape(), "tensor-parallel loss: targets ", targets.shape(),
               " expected the shape of ids ", ids.shape());
  return parallel::vocab_parallel_cross_entropy(model.forward(ids), targets, *tp.tp, tp.vocab,
                                                tp.vocab_offset);
}

Tensor model_tp_full_logits(const ModelTensorParallel& tp, const Tensor& local) {
  autograd::NoGradGuard no_grad;
  const int last = int(local.ndim() - 1);
  Tensor all = sharding::gather_from_region(local.detach(), *tp.tp, last, tp.padded_vocab);
  return tp.padded_vocab == tp.vocab ? all : all.slice(last, 0, tp.vocab);
}

nn::NamedTensors model_tp_gather(const ModelTensorParallel& tp, const nn::NamedTensors& local) {
  nn::NamedTensors out;
  for (const auto& [name, t] : local) {
    const parallel::ShardSpec* s = spec_of(tp, name);
    out.emplace_back(name, s ? parallel::gather_tensor(t, *s, *tp.tp) : t.detach().clone());
  }
  return out;
}

nn::NamedTensors model_tp_shard(const ModelTensorParallel& tp, const nn::NamedTensors& full) {
  nn::NamedTensors out;
  for (const auto& [name, t] : full) {
    const parallel::ShardSpec* s = spec_of(tp, name);
    out.emplace_back(name, s ? parallel::shard_tensor(t, *s, tp.tp->size(), tp.tp->rank()) : t);
  }
  return out;
}

std::shared_ptr<models::CausalLM> model_tp_gather_model(models::CausalLM& model,
                                                        const ModelTensorParallel& tp) {
  const nn::NamedTensors state = model_tp_gather(tp, model.state_dict());
  auto full = model.model_config().build_empty();
  full->load_state_dict(state);
  return full;
}

void model_tp_reduce_gradients(models::CausalLM& model, const ModelTensorParallel& tp) {
  if (!tp.sequence_parallel) return;
  std::vector<Tensor> grads;
  for (const auto& [name, p] : model.named_parameters()) {
    if (tp.result.spec(name) != nullptr || !p.grad().defined()) continue;
    grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> flat;
  for (const Tensor& g : grads) flat.push_back(g.to(DType::F32).reshape({g.numel()}));
  Tensor all = concat(flat, 0);
  tp.tp->all_reduce(all);
  int64_t at = 0;
  for (Tensor& g : grads) {
    g.copy_from(all.slice(0, at, at + g.numel()).reshape(g.shape()));
    at += g.numel();
  }
}

double model_tp_grad_square_sum(models::CausalLM& model, const ModelTensorParallel& tp) {
  std::vector<Tensor> sharded, replicated;
  for (const auto& [name, p] : model.named_parameters())
    (tp.result.spec(name) != nullptr ? sharded : replicated).push_back(p);
  Tensor t = full({1}, grad_square_sum(sharded), DType::F64);
  tp.tp->all_reduce(t);
  return t.data<double>()[0] + grad_square_sum(replicated);
}

}  // namespace tessel::train
