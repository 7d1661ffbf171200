// SPDX-License-Identifier: Apache-2.0
// Expert tensor parallelism: the experts' FFN columns per rank and the region that joins them.
#include "tessel/parallel/expert/expert_tensor_parallel.h"

#include <memory>

#include "tessel/core/error.h"
#include "tessel/nn/moe.h"
#include "tessel/sharding/regions.h"

namespace tessel::parallel {
namespace {

// f and g over the tp communicator (sharding/regions.h): one all-reduce of the layer's rows
// forward (g) and one backward (f's), whatever the number of experts.
class ExpertRegion final : public nn::ExpertTensorRegion {
 public:
  explicit ExpertRegion(dist::CommPtr tp) : tp_(std::move(tp)) {}
  Tensor enter(const Tensor& x) override { return sharding::copy_to_region(x, *tp_); }
  Tensor reduce(const Tensor& partial) override {
    return sharding::reduce_from_region(partial, *tp_);
  }

 private:
  dist::CommPtr tp_;
};

}  // namespace

ExpertTensorParallelResult parallelize_expert_ffn(nn::Module& root, dist::CommPtr tp) {
  TESSEL_CHECK(tp != nullptr, "expert tensor parallel: the tp communicator is null");
  const int n = tp->size(), rank = tp->rank();
  auto region = std::make_shared<ExpertRegion>(tp);
  ExpertTensorParallelResult result;
  for (auto& [name, module] : root.named_modules()) {
    auto* moe = dynamic_cast<nn::MoE*>(module);
    if (moe == nullptr) continue;
    const int64_t ffn = moe->config().ffn_hidden;
    TESSEL_CHECK(ffn >= n, "expert tensor parallel: layer '", name, "' has experts of width ", ffn,
                 ", which --tp ", n, " ranks cannot split (each rank needs a column)");
    sharding::ShardLayout spec;
    spec.full = ffn;
    const auto ranges = sharding::shard_ranges(spec, n, rank);
    TESSEL_CHECK(ranges.size() == 1, "expert tensor parallel: ", spec.str(), " is not one range");
    moe->experts->keep_ffn(ranges[0].first, ranges[0].second, region);
    const std::string prefix = (name.empty() ? "" : name + ".") + "experts.";
    for (const auto& [param, t] : moe->experts->named_parameters()) {
      if (param == "proj_bias") continue;  // whole: added once after the sum
      spec.dim = (param == "down_proj" || param == "proj_weight") ? 2 : 1;
      result.sharded.emplace_back(prefix + param, spec);
    }
    ++result.layers;
  }
  TESSEL_CHECK(result.layers > 0, "expert tensor parallel: ", root.type_name(),
               " has no mixture-of-experts layer to split");
  return result;
}

}  // namespace tessel::parallel
