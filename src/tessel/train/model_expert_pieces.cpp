// SPDX-License-Identifier: Apache-2.0
// Expert pieces of an inference rank (model_expert_pieces.h).
#include "tessel/train/model_expert_pieces.h"

#include "tessel/nn/moe.h"
#include "tessel/parallel/expert/expert_tensor_parallel.h"

namespace tessel::train {

sharding::LocalLayout ExpertPieces::placement(const ModelTensorParallel* tp,
                                              const std::string& name, const Shape& local) const {
  std::optional<sharding::LocalLayout> block;  // the rank's experts: rows of dim 0
  if (const auto it = experts.find(name); it != experts.end()) {
    sharding::ShardLayout spec;
    spec.dim = 0;
    spec.full = it->second;
    block = sharding::LocalLayout::of(spec, local, ep_size, ep_rank);
  }
  if (const auto it = ffn.find(name); it != ffn.end()) {
    const sharding::LocalLayout columns =
        sharding::LocalLayout::of(it->second, local, tp_size, tp_rank);
    return block ? columns.within(*block) : columns;
  }
  if (block) return *block;
  const sharding::ShardLayout* spec = tp ? tp->result.spec(name) : nullptr;
  return spec ? sharding::LocalLayout::of(*spec, local, tp->tp->size(), tp->tp->rank())
              : sharding::LocalLayout::whole(local);
}

ExpertPieces split_experts_over_tp(models::CausalLM& model, const dist::CommPtr& tp) {
  ExpertPieces out;
  if (!tp || tp->size() == 1 || !model.model_config().has_experts()) return out;
  out.tp_size = tp->size();
  out.tp_rank = tp->rank();
  for (auto& [name, spec] : parallel::parallelize_expert_ffn(model, tp).sharded)
    out.ffn[name] = spec;
  return out;
}

int64_t expert_parameter_bytes(models::CausalLM& model,
                               const std::function<bool(const std::string&)>& keep) {
  int64_t bytes = 0;
  for (auto& [name, module] : model.named_modules())
    if (auto* moe = dynamic_cast<nn::MoE*>(module))
      for (const auto& [param, t] : moe->experts->named_parameters())
        if (!keep || keep((name.empty() ? "" : name + ".") + "experts." + param))
          bytes += int64_t(t.numel()) * int64_t(dtype_size(t.dtype()));
  return bytes;
}

}  // namespace tessel::train
