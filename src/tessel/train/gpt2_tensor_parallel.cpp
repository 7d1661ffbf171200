// SPDX-License-Identifier: Apache-2.0
// GPT-2's tensor-parallel glue: the built-in plan, head and vocabulary checks, the vocab-parallel
// loss, gathered and sliced checkpoints, and the gradient reductions over tp.
#include "tessel/train/gpt2_tensor_parallel.h"

#include <cmath>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/ops/shape.h"
#include "tessel/parallel/vocab_parallel.h"
#include "tessel/sharding/regions.h"
#include "tessel/train/grad_clip.h"

namespace tessel::train {

const char* const kGpt2TensorParallelPlan = R"({
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

namespace {

// The sharded parameter a (possibly optimizer-prefixed) name refers to, or null.
const parallel::ShardSpec* spec_of(const Gpt2TensorParallel& tp, const std::string& name) {
  for (const char* prefix : {"", "exp_avg.", "exp_avg_sq."}) {
    const std::string p = prefix;
    if (name.compare(0, p.size(), p) != 0) continue;
    if (const parallel::ShardSpec* s = tp.result.spec(name.substr(p.size()))) return s;
  }
  return nullptr;
}

}  // namespace

Gpt2TensorParallel gpt2_parallelize(models::GPT2& model, dist::CommPtr tp,
                                    const std::string& plan_path, bool sequence_parallel,
                                    const std::function<void(const std::string&)>& note) {
  TESSEL_CHECK(tp != nullptr, "gpt2_parallelize: the tensor-parallel communicator is null");
  const models::GPT2Config& c = model.config();
  const int n = tp->size();
  TESSEL_CHECK(c.n_head % n == 0, "tensor parallelism: GPT-2's n_head = ", c.n_head,
               " is not divisible by tp = ", n, " (attention is split per head)");
  TESSEL_CHECK(c.tie_word_embeddings,
               "tensor parallelism: GPT-2 with an untied lm_head is not "
               "supported (the plan splits the tied wte by vocabulary)");
  const parallel::ParallelPlan plan =
      plan_path.empty() ? parallel::ParallelPlan::parse(kGpt2TensorParallelPlan, "built-in GPT-2")
                        : parallel::ParallelPlan::load(plan_path);
  parallel::ParallelizeOptions po;
  po.sequence_parallel = sequence_parallel;
  po.sizes = {{"head_dim", c.n_embd / c.n_head}, {"n_embd", c.n_embd}, {"n_head", c.n_head}};
  Gpt2TensorParallel out;
  out.tp = tp;
  out.vocab = c.vocab_size;
  out.padded_vocab = parallel::padded_vocab_size(c.vocab_size, n);
  out.sequence_parallel = sequence_parallel;
  out.result = parallel::parallelize(model, tp, plan, po);
  const parallel::ShardSpec* wte = out.result.spec("wte.weight");
  TESSEL_CHECK(wte != nullptr && out.result.applied.size() > 0,
               "tensor parallelism: the plan must split wte with VocabParallel (GPT-2's LM head "
               "multiplies with it)");
  out.vocab_offset = int64_t(tp->rank()) * (out.padded_vocab / n);
  if (out.padded_vocab != out.vocab && note) {
    note("tensor parallel: vocabulary " + std::to_string(out.vocab) + " padded to " +
         std::to_string(out.padded_vocab) + " (a multiple of tp = " + std::to_string(n) +
         "); the padding rows are zeros, left out of the loss and of sampling");
  }
  return out;
}

Tensor gpt2_tp_loss(models::GPT2& model, const Gpt2TensorParallel& tp, const Tensor& ids,
                    const Tensor& targets) {
  TESSEL_CHECK(targets.shape() == ids.shape(), "GPT2 tensor-parallel loss: targets ",
               targets.shape(), " expected the shape of ids ", ids.shape());
  return parallel::vocab_parallel_cross_entropy(model.forward(ids), targets, *tp.tp, tp.vocab,
                                                tp.vocab_offset);
}

Tensor gpt2_tp_full_logits(const Gpt2TensorParallel& tp, const Tensor& local) {
  autograd::NoGradGuard no_grad;
  const int last = int(local.ndim() - 1);
  Tensor all = sharding::gather_from_region(local.detach(), *tp.tp, last, tp.padded_vocab);
  return tp.padded_vocab == tp.vocab ? all : all.slice(last, 0, tp.vocab);
}

nn::NamedTensors gpt2_tp_gather(const Gpt2TensorParallel& tp, const nn::NamedTensors& local) {
  nn::NamedTensors out;
  for (const auto& [name, t] : local) {
    const parallel::ShardSpec* s = spec_of(tp, name);
    out.emplace_back(name, s ? parallel::gather_tensor(t, *s, *tp.tp) : t.detach().clone());
  }
  return out;
}

nn::NamedTensors gpt2_tp_shard(const Gpt2TensorParallel& tp, const nn::NamedTensors& full) {
  nn::NamedTensors out;
  for (const auto& [name, t] : full) {
    const parallel::ShardSpec* s = spec_of(tp, name);
    out.emplace_back(name, s ? parallel::shard_tensor(t, *s, tp.tp->size(), tp.tp->rank()) : t);
  }
  return out;
}

std::shared_ptr<models::GPT2> gpt2_tp_gather_model(models::GPT2& model,
                                                   const Gpt2TensorParallel& tp) {
  const nn::NamedTensors state = gpt2_tp_gather(tp, model.state_dict());
  auto full = std::make_shared<models::GPT2>(model.config(), nn::Init::none());
  full->load_state_dict(state);
  return full;
}

void gpt2_tp_reduce_gradients(models::GPT2& model, const Gpt2TensorParallel& tp) {
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

double gpt2_tp_grad_square_sum(models::GPT2& model, const Gpt2TensorParallel& tp) {
  std::vector<Tensor> sharded, replicated;
  for (const auto& [name, p] : model.named_parameters())
    (tp.result.spec(name) != nullptr ? sharded : replicated).push_back(p);
  Tensor t = full({1}, grad_square_sum(sharded), DType::F64);
  tp.tp->all_reduce(t);
  return t.data<double>()[0] + grad_square_sum(replicated);
}

}  // namespace tessel::train
