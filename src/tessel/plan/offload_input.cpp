// SPDX-License-Identifier: Apache-2.0
// The offload model's input from a model family (offload_model.h): the model built on the meta
// device, its parameters in the trainer's order, its units as the trainer forms them from the
// family's unit paths (ZeRO-3's units: one per parameter outside every listed module, on the
// root, then one per listed module), and under mixed precision the masters that get copies.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "tessel/autograd/engine.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/autograd/meta.h"
#include "tessel/core/error.h"
#include "tessel/nn/autocast.h"
#include "tessel/plan/offload_model.h"
#include "tessel/plan/trace.h"
#include "tessel/tensor/default_device.h"

namespace tessel::plan {

OffloadInput offload_input(const models::ModelConfig& config, DType compute,
                           const OffloadBudgets& budgets, int64_t micro_batches,
                           const std::function<void(models::CausalLM&)>& transform,
                           const PipelineRank& pipeline) {
  TESSEL_CHECK(compute == DType::F32 || compute == DType::BF16 || compute == DType::F16,
               "offload model: compute dtype ", dtype_name(compute),
               " is not one of f32, bf16, f16");
  DefaultDeviceScope meta(Device::meta());
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  if (transform) transform(*model);
  OffloadInput in;
  in.compute = compute;
  in.budgets = budgets;
  in.micro_batches = micro_batches;
  std::set<const TensorImpl*> covered;
  if (compute != DType::F32)
    for (const Tensor& m : nn::LowPrecisionScope::masters({model.get()}))
      covered.insert(m.impl_ptr().get());
  // A pipeline rank trains its stages' parameters only (a last stage's copy of a tied
  // embedding is plain memory, not in chunks).
  std::set<std::string> trained;
  if (pipeline.active()) {
    in.pipeline = pipeline;
    for (const std::string& name : pipeline_rank_parameters(*model, pipeline, false))
      trained.insert(name);
  }
  for (const auto& [name, p] : model->named_parameters())
    if (!pipeline.active() || trained.count(name))
      in.tensors.push_back({name, p.numel(), covered.count(p.impl_ptr().get()) > 0});
  std::set<std::string> taken;
  std::vector<OffloadUnit> listed;
  for (const std::string& path : model->unit_paths()) {
    OffloadUnit u{path, false, {}};
    for (size_t t = 0; t < in.tensors.size(); ++t)
      if (in.tensors[t].name.rfind(path + ".", 0) == 0 && taken.insert(in.tensors[t].name).second)
        u.tensors.push_back(t);
    if (!u.tensors.empty()) listed.push_back(std::move(u));
  }
  for (size_t t = 0; t < in.tensors.size(); ++t)
    if (!taken.count(in.tensors[t].name)) in.units.push_back({in.tensors[t].name, true, {t}});
  for (OffloadUnit& u : listed) in.units.push_back(std::move(u));
  if (pipeline.active()) {
    // A stage never runs the root's forward: the embeddings' units are held around their own
    // modules (Trainer::zero3_units); each unit belongs to its first parameter's stage.
    const int last = pipeline.num_stages() - 1;
    const std::vector<std::string> head = model->head_tied_parameters();
    for (OffloadUnit& u : in.units) {
      u.root = false;
      u.stage = pipeline.stage_of_layer(model->layer_of_parameter(in.tensors[u.tensors[0]].name));
    }
    if (pipeline.owner(last) != pipeline.rank)
      for (size_t t = 0; t < in.tensors.size(); ++t)
        if (std::find(head.begin(), head.end(), in.tensors[t].name) != head.end())
          in.tied.push_back(t);
  }
  return in;
}

std::vector<size_t> gradient_ready_order(
    const models::ModelConfig& config, const OffloadInput& in,
    const std::function<void(models::CausalLM&)>& transform,
    const std::function<Tensor(const Tensor& logits, const Tensor& targets)>& loss_of) {
  DefaultDeviceScope meta(Device::meta());
  std::shared_ptr<models::CausalLM> model = config.build_empty();
  if (transform) transform(*model);
  model->train();
  std::map<std::string, size_t> index;
  for (size_t t = 0; t < in.tensors.size(); ++t) index[in.tensors[t].name] = t;
  std::vector<size_t> order;
  std::vector<std::pair<Tensor, int64_t>> hooks;
  std::vector<Tensor> param(in.tensors.size());
  for (const auto& [name, p] : model->named_parameters()) {
    auto it = index.find(name);
    if (it == index.end()) continue;
    const size_t t = it->second;
    param[t] = p;
    hooks.emplace_back(p, autograd::register_grad_ready_hook(
                              p, [&order, t](const Tensor&) { order.push_back(t); }));
  }
  // Under mixed precision the offloaded run's copies join the graph unit by unit, as each unit's
  // forward starts (OffloadStrategy::on_pre_forward), so their casts' backwards, and with them
  // the masters' gradients, come at the end of each unit's backward.
  std::optional<nn::LowPrecisionScope> scope;
  std::vector<std::pair<nn::Module*, int64_t>> unit_hooks;
  if (in.compute != DType::F32) {
    scope.emplace(std::vector<nn::Module*>{model.get()}, in.compute,
                  [](const Tensor&) { return true; });
    std::map<std::string, nn::Module*> modules;
    for (auto& [path, m] : model->named_modules()) modules[path] = m;
    for (const OffloadUnit& u : in.units) {
      nn::Module* m = u.root ? model.get() : modules.at(u.name);
      std::vector<Tensor> masters;
      for (size_t t : u.tensors)
        if (in.tensors[t].copy) masters.push_back(param[t]);
      unit_hooks.emplace_back(m, m->register_forward_pre_hook(
                                     [&scope, masters](nn::Module&, const std::vector<Tensor>&) {
                                       for (const Tensor& master : masters)
                                         scope->cast_deferred(master);
                                     }));
    }
  }
  const Tensor ids = empty({1, 2}, DType::I64), targets = empty({1, 2}, DType::I64);
  const Tensor loss = loss_of ? loss_of(model->forward(ids), targets) : model->loss(ids, targets);
  Tensor seed;
  {
    autograd::NoGradGuard no_grad;
    seed = ones(loss.shape(), loss.dtype());
  }
  autograd::backward({loss}, {seed});
  for (auto& [m, h] : unit_hooks) m->remove_hook(h);
  for (auto& [p, h] : hooks) autograd::remove_grad_ready_hook(p, h);
  TESSEL_CHECK(order.size() == in.tensors.size(), "offload model: one backward made ", order.size(),
               " of the ", in.tensors.size(), " gradients ready");
  return order;
}

}  // namespace tessel::plan
