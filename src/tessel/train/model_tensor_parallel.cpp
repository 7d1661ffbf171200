// SPDX-License-Identifier: Apache-2.0
// A model's tensor-parallel glue: the family's plan, the padded vocabulary, the vocab-parallel
// loss, gathered and sliced checkpoints, and the gradient reductions over tp.
#include "tessel/train/model_tensor_parallel.h"

#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/error.h"
#include "tessel/ops/shape.h"
#include "tessel/parallel/expert/expert_sequence_parallel.h"
#include "tessel/parallel/tensor/vocab_parallel.h"
#include "tessel/sharding/regions.h"

namespace tessel::train {

namespace {

// The sharded parameter a (possibly optimizer-prefixed) name refers to, or null.
const sharding::ShardLayout* spec_of(const ModelTensorParallel& tp, const std::string& name) {
  for (const char* prefix : {"", "exp_avg.", "exp_avg_sq."}) {
    const std::string p = prefix;
    if (name.compare(0, p.size(), p) != 0) continue;
    if (const sharding::ShardLayout* s = tp.result.spec(name.substr(p.size()))) return s;
  }
  return nullptr;
}

}  // namespace

ModelTensorParallel parallelize_model(models::CausalLM& model, dist::CommPtr tp,
                                      const std::string& plan_path, bool sequence_parallel,
                                      const std::function<void(const std::string&)>& note,
                                      bool copy_values) {
  TESSEL_CHECK(tp != nullptr, "parallelize_model: the tensor-parallel communicator is null");
  const models::ModelConfig& c = model.model_config();
  const int n = tp->size();
  const models::TensorParallelSpec spec = c.tensor_parallel(n);
  const parallel::ParallelPlan plan =
      plan_path.empty() ? parallel::ParallelPlan::parse(spec.plan_json, "built-in " + c.summary())
                        : parallel::ParallelPlan::load(plan_path);
  if (!spec.head_region_entry.empty()) {
    // Checked here, not left to the equivalence tests: a plan without it trains, silently wrong.
    const parallel::PlanRule* entry = nullptr;
    for (const parallel::PlanRule& r : plan.rules) {
      if (parallel::pattern_matches(r.pattern, spec.head_region_entry)) entry = &r;
    }
    TESSEL_CHECK(
        entry != nullptr && entry->style == parallel::StyleKind::Sequence && entry->gather_output,
        "tensor parallelism: the LM head multiplies with the rows of ", spec.vocab_parallel_weight,
        ", so its input must enter the tensor-parallel region at '", spec.head_region_entry,
        "': the plan", plan_path.empty() ? std::string() : " " + plan_path, " must give it ",
        "{\"style\": \"Sequence\", \"gather_output\": true}",
        entry == nullptr
            ? std::string(" (no rule matches it)")
            : " (its rule '" + entry->pattern + "' is " + parallel::style_name(entry->style) +
                  (entry->gather_output ? "" : " without gather_output") + ")");
  }
  parallel::ParallelizeOptions po;
  po.sequence_parallel = sequence_parallel;
  po.copy_values = copy_values;
  for (const auto& [name, value] : spec.sizes) po.sizes[name] = value;
  ModelTensorParallel out;
  out.tp = tp;
  out.vocab = c.vocabulary_size();
  out.padded_vocab = parallel::padded_vocab_size(c.vocabulary_size(), n);
  out.sequence_parallel = sequence_parallel;
  out.result = parallel::parallelize(model, tp, plan, po);
  // A mixture-of-experts layer's capacity, dropping order and balance loss are those of the
  // call's tokens: under sequence parallelism it routes its piece with the whole call's choices
  // and sums, or gathers the pieces (expert_sequence_parallel.h; docs/MOE.md, "ep with tp").
  if (sequence_parallel && c.has_experts())
    parallel::gather_moe_tokens_over_sequence(model, tp, out.result.sequence);
  const sharding::ShardLayout* embedding = out.result.spec(spec.vocab_parallel_weight);
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

Tensor model_tp_eval_loss(models::CausalLM& model, const ModelTensorParallel& tp, const Tensor& ids,
                          const Tensor& targets, int64_t positions) {
  TESSEL_CHECK(targets.shape() == ids.shape(), "tensor-parallel eval loss: targets ",
               targets.shape(), " expected the shape of ids ", ids.shape());
  // Under sequence parallelism the blocks leave each rank its piece of the positions, and the head
  // (ln_f's region entry) would all-gather whatever pieces it is given by the whole sequence's
  // split. So the pieces are gathered once here ([B, T, C]: the width, not the vocabulary), and
  // sequence parallelism is paused for the head's chunks, which then run as under plain tp.
  std::optional<SequenceParallelPause> pause;
  std::function<Tensor(const Tensor&)> gather;
  if (tp.sequence_parallel) {
    gather = [&](const Tensor& piece) {
      const std::shared_ptr<parallel::SequenceState>& seq = tp.result.sequence;
      TESSEL_CHECK(seq != nullptr && seq->active && seq->length >= piece.size(1),
                   "tensor-parallel eval loss: the blocks' output ", piece.shape(),
                   " is not a sequence piece (sequence parallelism inactive or length ",
                   seq ? seq->length : 0, ")");
      Tensor whole = sharding::gather_from_region(piece, *tp.tp, 1, seq->length);
      pause.emplace(tp);
      return whole;
    };
  }
  double total = 0;
  int64_t counted = 0;
  model.for_each_logits_chunk(
      ids, positions,
      [&](const Tensor& logits, int64_t first) {
        const Tensor tgt = targets.slice(1, first, first + logits.size(1));
        int64_t here = 0;
        for (int64_t v : tgt.to_vector<int64_t>()) here += v != -100;
        // Every rank holds the same targets, so all take part in the collective or none does.
        if (here == 0) return;
        const Tensor mean =
            parallel::vocab_parallel_cross_entropy(logits, tgt, *tp.tp, tp.vocab, tp.vocab_offset);
        total += mean.item() * double(here);
        counted += here;
      },
      gather);
  return full({}, counted > 0 ? total / double(counted) : std::nan(""));
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
    const sharding::ShardLayout* s = spec_of(tp, name);
    out.emplace_back(name, s ? sharding::gather_tensor(t, *s, *tp.tp) : t.detach().clone());
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

TpShare model_tp_share(const ModelTensorParallel& tp, const std::string& name) {
  const sharding::ShardLayout* s = tp.result.spec(name);
  if (s == nullptr) return TpShare::Whole;
  return sharding::shard_leader(*s, tp.tp->size(), tp.tp->rank()) ? TpShare::Piece
                                                                  : TpShare::SecondCopy;
}

namespace {

bool has_replicated_pieces(const ModelTensorParallel& tp) {
  for (const auto& [name, spec] : tp.result.sharded)
    if (sharding::shard_replicas(spec, tp.tp->size()) > 1) return true;
  return false;
}

// The sequence-parallel sum: every rank adds its addend to the whole gradient. A MoE layer that
// routes its own piece has addends too; one that gathers the sequence ran on all of it on every
// rank (expert_sequence_parallel.h), so its parameters' gradients are complete already.
void sum_whole_gradients(models::CausalLM& model, const ModelTensorParallel& tp,
                         const SpanHold& hold) {
  const std::set<std::string> whole_sequence = parallel::moe_parameter_names(model);
  const std::set<std::string> pieces = parallel::moe_parameter_names(model, /*pieces=*/true);
  std::vector<Tensor> grads;
  for (const auto& [name, p] : model.named_parameters()) {
    if (tp.result.spec(name) != nullptr || whole_sequence.count(name)) continue;
    // An MoE layer's experts may get no row of this rank's piece while a tp peer's get some: every
    // rank must bring the same gradients to the sum.
    if (!p.grad().defined() && pieces.count(name) && p.requires_grad())
      Tensor(p).set_grad(zeros(p.shape(), p.dtype()));
    if (!p.grad().defined()) continue;
    grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  std::vector<Tensor> flat;
  for (const Tensor& g : grads) {
    const std::shared_ptr<void> held = hold ? hold(g, false) : nullptr;
    const Tensor f = g.to(DType::F32).reshape({g.numel()});
    flat.push_back(held ? f.clone() : f);  // a chunk's bytes may move once released
  }
  Tensor all = concat(flat, 0);
  tp.tp->all_reduce(all);
  int64_t at = 0;
  for (Tensor& g : grads) {
    const std::shared_ptr<void> held = hold ? hold(g, true) : nullptr;
    g.copy_from(all.slice(0, at, at + g.numel()).reshape(g.shape()));
    at += g.numel();
  }
}

// Replicated pieces: each rank writes its copy's gradient at the piece's rows of a zero buffer of
// the whole parameter; the all-reduce over tp then sums exactly the copies of each piece.
void sum_replicated_pieces(models::CausalLM& model, const ModelTensorParallel& tp,
                           const SpanHold& hold) {
  const int n = tp.tp->size(), rank = tp.tp->rank();
  struct Item {
    Tensor grad;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // rows of the whole parameter
    int64_t row = 0, offset = 0;                      // row width; where it starts in the buffer
  };
  std::vector<Item> items;
  int64_t total = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const sharding::ShardLayout* s = tp.result.spec(name);
    if (s == nullptr || sharding::shard_replicas(*s, n) == 1 || !p.grad().defined()) continue;
    TESSEL_CHECK(s->dim == 0, "tensor parallelism: replicated pieces of '", name,
                 "' must be split along dim 0, not ", s->dim);
    Item it{p.grad(), sharding::shard_ranges(*s, n, rank), p.numel() / p.size(0), total};
    total += s->full * it.row;
    items.push_back(std::move(it));
  }
  if (items.empty()) return;
  Tensor buffer = zeros({total}, DType::F32);
  for (const Item& it : items) {
    const std::shared_ptr<void> held = hold ? hold(it.grad, false) : nullptr;
    const Tensor g = it.grad.to(DType::F32).reshape({it.grad.numel()});
    int64_t local = 0;
    for (const auto& [start, len] : it.ranges) {
      const int64_t at = it.offset + start * it.row, count = len * it.row;
      Tensor window = buffer.narrow(0, at, count);  // a view: the write lands in the buffer
      window.copy_from(g.narrow(0, local, count));
      local += count;
    }
  }
  tp.tp->all_reduce(buffer);
  for (Item& it : items) {
    std::vector<Tensor> rows;
    for (const auto& [start, len] : it.ranges) {
      const int64_t at = it.offset + start * it.row;
      rows.push_back(buffer.narrow(0, at, len * it.row));
    }
    const std::shared_ptr<void> held = hold ? hold(it.grad, true) : nullptr;
    it.grad.copy_from(concat(rows, 0).reshape(it.grad.shape()));
  }
}

}  // namespace

bool model_tp_sums_gradients(const ModelTensorParallel& tp) {
  return tp.sequence_parallel || has_replicated_pieces(tp);
}

void model_tp_reduce_gradients(models::CausalLM& model, const ModelTensorParallel& tp,
                               const SpanHold& hold) {
  autograd::NoGradGuard no_grad;
  if (tp.sequence_parallel) sum_whole_gradients(model, tp, hold);
  if (has_replicated_pieces(tp)) sum_replicated_pieces(model, tp, hold);
}

}  // namespace tessel::train
