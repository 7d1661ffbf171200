// SPDX-License-Identifier: Apache-2.0
// The inference dispatch of expert parallelism (expert_inference.h). Rows arrive grouped by global
// expert (routing.offsets), so rank r's experts own rows [offsets[r L], offsets[(r + 1) L]) with L
// experts per rank, and the all-gather in rank order lays the blocks back in expert order.
#include "tessel/parallel/expert/expert_inference.h"

#include <utility>
#include <vector>

#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"

namespace tessel::parallel {
namespace {

Tensor i64_tensor(const std::vector<int64_t>& values) {
  return from_data(values, Shape{int64_t(values.size())});
}

class ExpertInferenceDispatch final : public nn::ExpertDispatch {
 public:
  explicit ExpertInferenceDispatch(dist::CommPtr ep) : ep_(std::move(ep)) {}

  Tensor run(nn::ExpertMLPs& experts, const Tensor& xs, const nn::Routing& r) override {
    const int n = ep_->size(), rank = ep_->rank();
    const int64_t local = experts.experts(), first = experts.first_expert();
    TESSEL_CHECK(r.experts == local * n && first == local * rank,
                 "expert-parallel inference: the layer routes to ", r.experts,
                 " experts, but rank ", rank, " of ", n, " holds experts [", first, ", ",
                 first + local, ")");
    TESSEL_CHECK(!autograd::needs_grad({xs}),
                 "expert-parallel inference has no backward; training splits the experts with "
                 "parallelize_experts");
    // The first call and then one in kCheckEvery: a difference between the ranks' inputs or
    // kernels persists, so a sample finds it within a few steps, and a decode step's latency is
    // one collective per layer rather than two.
    if (calls_++ % kCheckEvery == 0) check_same_routing(r);
    const int64_t width = xs.numel() / std::max<int64_t>(xs.size(0), 1);
    std::vector<int64_t> counts(static_cast<size_t>(n));  // elements of each rank's block
    for (int s = 0; s < n; ++s)
      counts[size_t(s)] =
          (r.offsets[size_t((s + 1) * local)] - r.offsets[size_t(s * local)]) * width;
    const int64_t begin = r.offsets[size_t(first)], end = r.offsets[size_t(first + local)];
    Tensor mine;
    if (end > begin) {
      // This rank's experts over their rows, with offsets and expert indices made local.
      std::vector<int64_t> offsets(size_t(local + 1)), expert_of_row(size_t(end - begin));
      for (int64_t j = 0; j <= local; ++j)
        offsets[size_t(j)] = r.offsets[size_t(first + j)] - begin;
      for (int64_t i = begin; i < end; ++i)
        expert_of_row[size_t(i - begin)] = r.expert_of_row[size_t(i)] - first;
      mine = experts.forward(xs.narrow(0, begin, end - begin), i64_tensor(offsets),
                             i64_tensor(expert_of_row));
    } else {
      // No row for these experts: an empty block, still in the gather every rank makes.
      Shape shape = xs.shape();
      shape[0] = 0;
      mine = empty(shape, xs.dtype());
    }
    Tensor ys = empty(xs.shape(), mine.dtype());
    ep_->all_gather_v(mine, ys, counts);
    return ys;
  }

 private:
  // Every rank must have routed the same rows to the same experts (they ran the same batch through
  // the same replicated weights): the blocks' sizes would otherwise disagree and the gather would
  // mix rows. One small all-gather of the offsets turns a silent mix-up into an Error.
  void check_same_routing(const nn::Routing& r) {
    const int n = ep_->size();
    Tensor own = i64_tensor(r.offsets);
    Tensor all = empty(Shape{own.numel() * n}, DType::I64);
    ep_->all_gather(own, all);
    const std::vector<int64_t> v = all.to_vector<int64_t>();
    for (int s = 0; s < n; ++s)
      for (size_t e = 0; e < r.offsets.size(); ++e)
        TESSEL_CHECK(v[size_t(s) * r.offsets.size() + e] == r.offsets[e],
                     "expert-parallel inference: rank ", s, " routed ",
                     v[size_t(s) * r.offsets.size() + e], " rows before expert ", e, ", this rank ",
                     r.offsets[e],
                     "; every rank must run the same batch with the same weights and threads");
  }

  static constexpr int64_t kCheckEvery = 256;
  dist::CommPtr ep_;
  int64_t calls_ = 0;
};

}  // namespace

std::string expert_inference_error(nn::Module& root, int ep) {
  bool any = false;
  for (auto& [name, module] : root.named_modules()) {
    const auto* moe = dynamic_cast<const nn::MoE*>(module);
    if (moe == nullptr) continue;
    any = true;
    const std::string error = expert_parallel_error(moe->config(), ep, name);
    if (!error.empty()) return error;
  }
  if (!any)
    return "expert parallel: --ep " + std::to_string(ep) + " needs a mixture-of-experts model; " +
           root.type_name() + " has no MoE layer";
  return "";
}

ExpertParallelResult parallelize_experts_inference(nn::Module& root, dist::CommPtr ep) {
  TESSEL_CHECK(ep != nullptr, "expert-parallel inference: the ep communicator is null");
  const std::string error = expert_inference_error(root, ep->size());
  TESSEL_CHECK(error.empty(), error);
  const int n = ep->size(), rank = ep->rank();
  ExpertParallelResult result;
  const auto dispatch = std::make_shared<ExpertInferenceDispatch>(ep);
  for (auto& [name, module] : root.named_modules()) {
    auto* moe = dynamic_cast<nn::MoE*>(module);
    if (moe == nullptr) continue;
    const int64_t experts = moe->config().num_experts, local = experts / n;
    if (moe->experts->first_expert() != rank * local || moe->experts->experts() != local)
      moe->experts->keep_experts(rank * local, local);
    moe->set_dispatch(dispatch);
    const std::string prefix = (name.empty() ? "" : name + ".") + "experts.";
    for (const auto& [param, t] : moe->experts->named_parameters()) {
      result.params.push_back(prefix + param);
      result.experts.push_back(experts);
    }
    ++result.layers;
  }
  return result;
}

}  // namespace tessel::parallel
