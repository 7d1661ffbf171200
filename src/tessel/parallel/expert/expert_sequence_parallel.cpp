// SPDX-License-Identifier: Apache-2.0
// The sequence pieces of an MoE layer's tokens gathered before it and split after it, as
// redistributions whose gradient arrives as placed (replicated before the split, so the
// gather's backward takes the piece; the split's backward all-gathers).
#include "tessel/parallel/expert/expert_sequence_parallel.h"

#include <utility>

#include "tessel/core/error.h"
#include "tessel/nn/moe.h"
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

std::set<std::string> moe_parameter_names(nn::Module& root) {
  std::set<std::string> names;
  for (auto& [name, module] : root.named_modules()) {
    auto* moe = dynamic_cast<nn::MoE*>(module);
    if (moe == nullptr) continue;
    for (const auto& [param, t] : moe->named_parameters())
      names.insert((name.empty() ? "" : name + ".") + param);
  }
  return names;
}

}  // namespace tessel::parallel
