// SPDX-License-Identifier: Apache-2.0
// An MoE layer's sequence pieces: routed in place with the whole call's choices and sums, or
// gathered before it and split after it, as redistributions whose gradient arrives as placed
// (replicated before the split, so the gather's backward takes the piece; the split's backward
// all-gathers).
#include "tessel/parallel/expert/expert_sequence_parallel.h"

#include <algorithm>
#include <utility>

#include "tessel/core/error.h"
#include "tessel/nn/moe.h"
#include "tessel/ops/ops.h"
#include "tessel/sharding/placement.h"
#include "tessel/sharding/redistribute.h"

namespace tessel::parallel {
namespace {

class SequenceTokens final : public nn::TokenRegion {
 public:
  SequenceTokens(std::string layer, dist::CommPtr tp, std::shared_ptr<SequenceState> sequence)
      : layer_(std::move(layer)), tp_(std::move(tp)), sequence_(std::move(sequence)) {}

  Tensor enter(const Tensor& x) override {
    if (!sequence_->active) return x;
    const int d = dim(x);
    const int64_t n = sequence_->length, size = sharding::shard_size(n, tp_->size(), tp_->rank());
    TESSEL_CHECK(x.size(d) == size, "MoE '", layer_, "' under sequence parallelism: input ",
                 x.shape(), " holds ", x.size(d), " positions, expected rank ", tp_->rank(),
                 "'s piece of ", size, " of a sequence of ", n);
    Shape whole = x.shape();
    whole[size_t(d)] = n;
    return sharding::redistribute_local(x, *tp_, sharding::Placement::shard(d),
                                        sharding::Placement::replicate(), whole);
  }

  Tensor leave(const Tensor& y) override {
    if (!sequence_->active) return y;
    const int d = dim(y);
    return sharding::redistribute_local(y, *tp_, sharding::Placement::replicate(),
                                        sharding::Placement::shard(d), y.shape());
  }

  bool routes_pieces() const override { return true; }
  bool pieces_active() const override { return sequence_->active; }

  // Every piece's choices (k integers a token) gathered over tp and laid out as one process's
  // tokens: [lead, sequence, k], rank r's positions at its offset in every row of the lead dims.
  std::vector<int64_t> whole_choices(const Tensor& x, const std::vector<int64_t>& choices,
                                     int64_t k, std::vector<int64_t>& positions,
                                     const MetaChoices& meta_choices) override {
    const int d = dim(x), parts = tp_->size(), rank = tp_->rank();
    const int64_t n = sequence_->length, size = x.size(d);
    TESSEL_CHECK(size == sharding::shard_size(n, parts, rank), "MoE '", layer_,
                 "' under sequence parallelism: input ", x.shape(), " holds ", size,
                 " positions, expected rank ", rank, "'s piece of a sequence of ", n);
    const int64_t lead = x.numel() / (size * x.size(-1));
    TESSEL_CHECK(int64_t(choices.size()) == lead * size * k, "MoE '", layer_, "': ", choices.size(),
                 " choices for ", lead * size, " tokens x top-", k);
    std::vector<int64_t> counts(static_cast<size_t>(parts)), offsets(static_cast<size_t>(parts));
    for (int p = 0; p < parts; ++p) {
      counts[size_t(p)] = lead * sharding::shard_size(n, parts, p) * k;
      offsets[size_t(p)] = sharding::shard_offset(n, parts, p);
    }
    std::vector<int64_t> got;
    if (x.device().is_meta()) {
      // A shape-only run (the planner's): every piece's choices as its rank's meta routing makes
      // them, in the gather's order.
      TESSEL_CHECK(bool(meta_choices), "MoE '", layer_,
                   "' under sequence parallelism on the meta device: no meta routing given");
      for (int p = 0; p < parts; ++p) {
        const std::vector<int64_t> piece = meta_choices(counts[size_t(p)] / k);
        got.insert(got.end(), piece.begin(), piece.end());
      }
    } else {
      Tensor all = empty(Shape{lead * n * k}, DType::I64);
      tp_->all_gather_v(from_data(choices, Shape{int64_t(choices.size())}), all, counts);
      got = all.to_vector<int64_t>();
    }
    std::vector<int64_t> whole(got.size());
    int64_t at = 0;  // rank p's block: [lead, its piece, k]
    for (int p = 0; p < parts; ++p) {
      const int64_t piece = sharding::shard_size(n, parts, p);
      for (int64_t b = 0; b < lead; ++b)
        for (int64_t t = 0; t < piece; ++t, at += k)
          std::copy_n(got.begin() + at, k, whole.begin() + ((b * n + offsets[size_t(p)] + t) * k));
    }
    positions.resize(size_t(lead * size));
    for (int64_t b = 0; b < lead; ++b)
      for (int64_t t = 0; t < size; ++t)
        positions[size_t(b * size + t)] = b * n + offsets[size_t(rank)] + t;
    return whole;
  }

  // part + (sum over tp of part - part), the bracket a constant: the value is the whole call's on
  // every rank and the gradient is part's own.
  Tensor whole_value(const Tensor& part) override {
    Tensor sum = part.detach().clone();
    tp_->all_reduce(sum);
    return ops::add(part, ops::sub(sum, part.detach()));
  }

 private:
  // The sequence dim of [..., T, hidden].
  int dim(const Tensor& t) const {
    TESSEL_CHECK(t.ndim() >= 2 && sequence_->length > 0, "MoE '", layer_,
                 "' under sequence parallelism: ", t.shape(), " is not a piece of a sequence of ",
                 sequence_->length);
    return int(t.ndim() - 2);
  }

  std::string layer_;
  dist::CommPtr tp_;
  std::shared_ptr<SequenceState> sequence_;
};

}  // namespace

int64_t gather_moe_tokens_over_sequence(nn::Module& root, dist::CommPtr tp,
                                        std::shared_ptr<SequenceState> sequence) {
  TESSEL_CHECK(tp != nullptr && sequence != nullptr,
               "MoE under sequence parallelism: the tp communicator and sequence state are needed");
  int64_t layers = 0;
  for (auto& [name, module] : root.named_modules()) {
    auto* moe = dynamic_cast<nn::MoE*>(module);
    if (moe == nullptr) continue;
    moe->set_token_region(std::make_shared<SequenceTokens>(name, tp, sequence));
    ++layers;
  }
  return layers;
}

std::set<std::string> moe_parameter_names(nn::Module& root, bool pieces) {
  std::set<std::string> names;
  for (auto& [name, module] : root.named_modules()) {
    auto* moe = dynamic_cast<nn::MoE*>(module);
    if (moe == nullptr || moe->routes_pieces() != pieces) continue;
    for (const auto& [param, t] : moe->named_parameters())
      names.insert((name.empty() ? "" : name + ".") + param);
  }
  return names;
}

}  // namespace tessel::parallel
