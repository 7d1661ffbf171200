// SPDX-License-Identifier: Apache-2.0
// Expert parallelism on the planner's meta model (cli/plan_layout.h, split_experts_on_meta): the
// runtime's own split (parallel::parallelize_experts, rank 0 of a shape-only ep communicator)
// with a stand-in for its all-to-all. The exchange reads the peers' row counts, which a meta
// communicator has no values for; on meta every ep rank routes alike (nn::MoE's balanced meta
// routing), so rank 0 computes the rows its own experts were routed and the others pass through:
// every local expert is run, and its parameters get their gradients, as in a run whose experts
// all receive rows.
#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tessel/cli/plan_layout.h"
#include "tessel/core/error.h"
#include "tessel/dist/meta/meta_communicator.h"
#include "tessel/nn/moe.h"
#include "tessel/ops/shape.h"
#include "tessel/parallel/expert/expert_parallel.h"

namespace tessel::cli {

namespace {

class MetaExpertDispatch final : public nn::ExpertDispatch {
 public:
  Tensor run(nn::ExpertMLPs& experts, const Tensor& xs, const nn::Routing& r) override {
    TESSEL_CHECK(xs.device().is_meta(),
                 "split_experts_on_meta: the stand-in exchange runs on the "
                 "meta device only");
    const int64_t first = experts.first_expert(), local = experts.experts();
    const int64_t lo = r.offsets[size_t(first)], hi = r.offsets[size_t(first + local)];
    TESSEL_CHECK(hi > lo, "split_experts_on_meta: no row reached experts [", first, ", ",
                 first + local, ") of ", r.experts, " (route more tokens)");
    const Tensor ys = experts.forward(ops::slice(xs, 0, lo, hi), empty({local + 1}, DType::I64),
                                      empty({hi - lo}, DType::I64));
    std::vector<Tensor> parts;
    if (lo > 0) parts.push_back(ops::slice(xs, 0, 0, lo));
    parts.push_back(ys);
    if (hi < xs.size(0)) parts.push_back(ops::slice(xs, 0, hi, xs.size(0)));
    return parts.size() == 1 ? ys : ops::concat(parts, 0);
  }
};

}  // namespace

std::vector<std::string> split_experts_on_meta(models::CausalLM& model, int ep) {
  const parallel::ExpertParallelResult split =
      parallel::parallelize_experts(model, dist::make_meta_communicator(ep, 0, "ep"));
  const auto dispatch = std::make_shared<MetaExpertDispatch>();
  for (auto& [name, module] : model.named_modules())
    if (auto* moe = dynamic_cast<nn::MoE*>(module)) moe->set_dispatch(dispatch);
  return split.params;
}

std::function<void(models::CausalLM&)> expert_rank_transform(
    const plan::MemoryLayout& layout, int ep, std::shared_ptr<std::set<std::string>> experts) {
  return [tp = layout.tp_transform, ep, experts](models::CausalLM& model) {
    if (tp) tp(model);  // the trainer's tensor axis comes before its expert axis
    for (const std::string& name : split_experts_on_meta(model, ep)) experts->insert(name);
  };
}

int64_t tokens_for_every_expert(models::CausalLM& model, const plan::MemoryLayout& layout) {
  // nn::MoE's meta routing sends token t to experts t k, ..., t k + k - 1 (mod E).
  int64_t tokens = 2;
  for (auto& [name, module] : model.named_modules())
    if (auto* moe = dynamic_cast<nn::MoE*>(module)) {
      const nn::MoEConfig& c = moe->config();
      tokens = std::max(tokens, (c.num_experts + c.top_k - 1) / c.top_k);
    }
  return tokens * (layout.message_seq > 0 ? int64_t(layout.tp) : 1);
}

}  // namespace tessel::cli
