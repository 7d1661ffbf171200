// SPDX-License-Identifier: Apache-2.0
// The vocab-parallel embedding style and the vocab-parallel cross-entropy (an autograd node whose
// backward needs no communication).
#include "tessel/parallel/tensor/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"
#include "tessel/ops/elementwise.h"
#include "tessel/ops/embedding.h"
#include "tessel/ops/quant_linear.h"
#include "tessel/sharding/regions.h"
#include "tessel/sharding/shard_layout.h"

namespace tessel::parallel {
namespace {

std::vector<int64_t> ids_of(const Tensor& ids) {
  TESSEL_CHECK(ids.dtype() == DType::I64 || ids.dtype() == DType::I32, "vocab parallel: ids ",
               dtype_name(ids.dtype()), " expected i32/i64");
  std::vector<int64_t> out(size_t(ids.numel()));
  if (ids.dtype() == DType::I64) {
    std::copy_n(ids.data<int64_t>(), out.size(), out.begin());
  } else {
    std::copy_n(ids.data<int32_t>(), out.size(), out.begin());
  }
  return out;
}

struct VocabState {
  dist::CommPtr tp;
  const nn::Embedding* embedding = nullptr;  // its weight member (read per call: see Linear's)
  int64_t vocab = 0, offset = 0, rows = 0;
  TpOptions options;
};

// Shape-only (the planner's trace on the meta device, plan/trace.h): the same ops and the same
// allocations as the host path, with ids nobody can read.
Tensor run_vocab_embedding_meta(const VocabState& st, const Tensor& ids) {
  Shape mask_shape = ids.shape();
  mask_shape.push_back(1);
  Tensor looked = ops::embedding(st.embedding->weight, empty_like(ids).to(DType::I64));
  Tensor part = ops::mul(looked, empty(mask_shape, DType::F32).to(looked.dtype()));
  if (!sequence_sharded(st.options)) return sharding::reduce_from_region(part, *st.tp);
  const int d = int(part.ndim() - 2);
  st.options.sequence->length = part.size(d);
  return sharding::reduce_scatter_to_region(part, *st.tp, d);
}

Tensor run_vocab_embedding(const VocabState& st, const Tensor& ids) {
  if (ids.device().is_meta()) return run_vocab_embedding_meta(st, ids);
  const std::vector<int64_t> all = ids_of(ids);
  std::vector<int64_t> local(all.size());
  std::vector<float> keep(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    TESSEL_CHECK(all[i] >= 0 && all[i] < st.vocab, "VocabParallel embedding: id ", all[i],
                 " outside [0, ", st.vocab, ")");
    const bool mine = all[i] >= st.offset && all[i] < st.offset + st.rows;
    local[i] = mine ? all[i] - st.offset : 0;
    keep[i] = mine ? 1.0f : 0.0f;
  }
  Shape mask_shape = ids.shape();
  mask_shape.push_back(1);
  // A table converted for inference (--weights) dequantizes only the rows it looks up.
  const auto type = st.embedding->quant_type();
  const Tensor local_ids = from_data(local, ids.shape());
  Tensor looked =
      type ? ops::quant_embedding(*type, st.embedding->weight, st.embedding->dim(), local_ids)
           : ops::embedding(st.embedding->weight, local_ids);
  Tensor part = ops::mul(looked, from_data(keep, mask_shape).to(looked.dtype()));
  if (!sequence_sharded(st.options)) return sharding::reduce_from_region(part, *st.tp);
  TESSEL_CHECK(part.ndim() >= 2, "VocabParallel embedding under sequence parallelism: ids ",
               ids.shape().str(), " need a sequence dim");
  const int d = int(part.ndim() - 2);
  st.options.sequence->length = part.size(d);
  return sharding::reduce_scatter_to_region(part, *st.tp, d);
}

class VocabCrossEntropyBackward final : public autograd::Node {
 public:
  VocabCrossEntropyBackward(Tensor probs, std::vector<int64_t> local_target, double scale,
                            DType dtype)
      : probs_(std::move(probs)), target_(std::move(local_target)), scale_(scale), dtype_(dtype) {}
  std::string_view name() const override { return "VocabParallelCrossEntropyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    if (probs_.device().is_meta()) return {probs_.clone().to(dtype_)};  // shape-only
    const double g = double(grads[0].to(DType::F32).data<float>()[0]) * scale_;
    Tensor out = probs_.clone();
    float* p = out.data<float>();
    const int64_t v = out.size(out.ndim() - 1);
    for (size_t row = 0; row < target_.size(); ++row) {
      float* r = p + int64_t(row) * v;
      if (target_[row] == kIgnored) {
        std::fill(r, r + v, 0.0f);
        continue;
      }
      if (target_[row] >= 0) r[target_[row]] -= 1.0f;
      for (int64_t j = 0; j < v; ++j) r[j] = float(double(r[j]) * g);
    }
    return {out.to(dtype_)};
  }
  void release_saved() override { probs_ = Tensor(); }

  static constexpr int64_t kIgnored = -2;  // -1: the target is on another rank

 private:
  Tensor probs_;                 // softmax over the real vocabulary, this rank's columns
  std::vector<int64_t> target_;  // local column of the target, -1 elsewhere, kIgnored
  double scale_;                 // 1 / rows counted
  DType dtype_;
};

}  // namespace

int64_t padded_vocab_size(int64_t vocab, int parts) {
  TESSEL_CHECK(vocab >= 1 && parts >= 1, "padded_vocab_size: vocab ", vocab, " over ", parts,
               " ranks");
  return (vocab + parts - 1) / parts * parts;
}

void parallelize_vocab_embedding(nn::Embedding& embedding, dist::CommPtr tp,
                                 const TpOptions& options) {
  TESSEL_CHECK(tp != nullptr, "parallelize_vocab_embedding: the communicator is null");
  TESSEL_CHECK(!embedding.has_forward_override(), "parallelize_vocab_embedding: '",
               embedding.path(), "' is already parallelized");
  TESSEL_CHECK(!options.sequence_parallel || options.sequence != nullptr,
               "parallelize_vocab_embedding: sequence_parallel needs the shared SequenceState");
  const int n = tp->size(), r = tp->rank();
  auto st = std::make_shared<VocabState>();
  st->vocab = embedding.weight.size(0);
  const sharding::ShardLayout spec{0, st->vocab, padded_vocab_size(st->vocab, n)};
  st->rows = spec.padded_size() / n;
  st->offset = int64_t(r) * st->rows;
  Tensor piece = options.copy_values ? sharding::shard_tensor(embedding.weight.detach(), spec, n, r)
                                     : sharding::empty_shard(embedding.weight.detach(), spec, n, r);
  TensorImpl& impl = *embedding.weight.impl_ptr();  // rebound in place: name and handle kept
  impl.storage = piece.storage_ptr();
  impl.offset = piece.offset();
  impl.shape = piece.shape();
  impl.grad.reset();
  st->embedding = &embedding;
  st->tp = std::move(tp);
  st->options = options;
  embedding.set_forward_override([st](nn::Module& m, const std::vector<Tensor>& inputs) {
    TESSEL_CHECK(inputs.size() == 1 && inputs[0].defined(), "VocabParallel embedding '", m.path(),
                 "': expected one defined input");
    return run_vocab_embedding(*st, inputs[0]);
  });
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    dist::Communicator& tp, int64_t vocab, int64_t offset,
                                    int64_t ignore_index) {
  TESSEL_CHECK(logits.defined() && logits.ndim() >= 1, "vocab_parallel_cross_entropy: logits");
  const int64_t v = logits.size(logits.ndim() - 1), rows = logits.numel() / std::max<int64_t>(v, 1);
  TESSEL_CHECK(targets.defined() && targets.numel() == rows, "vocab_parallel_cross_entropy: ",
               targets.defined() ? targets.shape().str() : "undefined", " targets for logits ",
               logits.shape().str());
  TESSEL_CHECK(offset >= 0 && vocab >= 1, "vocab_parallel_cross_entropy: offset ", offset,
               " vocab ", vocab);
  if (logits.device().is_meta()) {
    // Shape-only: the host path's tensors and collectives, nothing computed.
    Tensor x = logits.detach().to(DType::F32);
    Tensor stats = full({rows}, 0.0);
    tp.all_reduce(stats, dist::ReduceOp::Max);
    Tensor sums = zeros({rows, 2});
    Tensor probs = zeros(x.shape());
    tp.all_reduce(sums, dist::ReduceOp::Sum);
    Tensor loss = full({}, 0.0);
    if (autograd::needs_grad({logits}))
      autograd::record(std::make_shared<VocabCrossEntropyBackward>(
                           probs, std::vector<int64_t>(size_t(rows), -1),
                           1.0 / double(std::max<int64_t>(rows, 1)), logits.dtype()),
                       {logits}, {loss});
    return loss;
  }
  const std::vector<int64_t> tgt = ids_of(targets);
  // Columns of this rank that are real tokens (the rest is padding).
  const int64_t real = std::clamp<int64_t>(vocab - offset, 0, v);
  Tensor x = logits.detach().to(DType::F32);
  const float* px = x.data<float>();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  Tensor stats = full({rows}, double(kNegInf));
  float* mx = stats.data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    const float* r = px + i * v;
    for (int64_t j = 0; j < real; ++j) mx[i] = std::max(mx[i], r[j]);
  }
  tp.all_reduce(stats, dist::ReduceOp::Max);
  // One all-reduce for both sums: [sum of exp, target logit] per row.
  Tensor sums = zeros({rows, 2});
  float* ps = sums.data<float>();
  Tensor probs = zeros(x.shape());
  float* pp = probs.data<float>();
  std::vector<int64_t> local_target(size_t(rows), -1);
  int64_t counted = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = tgt[size_t(i)];
    if (t == ignore_index) {
      local_target[size_t(i)] = VocabCrossEntropyBackward::kIgnored;
      continue;
    }
    TESSEL_CHECK(t >= 0 && t < vocab, "vocab_parallel_cross_entropy: target ", t, " outside [0, ",
                 vocab, ")");
    ++counted;
    const float* r = px + i * v;
    double s = 0;
    for (int64_t j = 0; j < real; ++j) {
      pp[i * v + j] = std::exp(r[j] - mx[i]);
      s += pp[i * v + j];
    }
    ps[2 * i] = float(s);
    if (t >= offset && t < offset + real) {
      local_target[size_t(i)] = t - offset;
      ps[2 * i + 1] = r[t - offset];
    }
  }
  tp.all_reduce(sums, dist::ReduceOp::Sum);
  double total = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (local_target[size_t(i)] == VocabCrossEntropyBackward::kIgnored) continue;
    const double s = ps[2 * i];
    total += std::log(s) + double(mx[i]) - double(ps[2 * i + 1]);
    for (int64_t j = 0; j < real; ++j) pp[i * v + j] = float(pp[i * v + j] / s);
  }
  const double mean = counted > 0 ? total / double(counted) : std::nan("");
  Tensor loss = full({}, mean);
  if (autograd::needs_grad({logits})) {
    autograd::record(std::make_shared<VocabCrossEntropyBackward>(
                         probs, std::move(local_target), counted > 0 ? 1.0 / double(counted) : 0.0,
                         logits.dtype()),
                     {logits}, {loss});
  }
  return loss;
}

}  // namespace tessel::parallel
