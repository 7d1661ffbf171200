// SPDX-License-Identifier: Apache-2.0
// LowPrecisionScope: the layers read their parameters through public handle members, so the
// scope replaces those handles (not the registered parameters, which stay the f32 masters the
// optimizer, the state dict and the gradient hooks see) and restores them on exit.
#include "tessel/nn/autocast.h"

#include <set>

#include "tessel/autograd/grad_mode.h"
#include "tessel/kernels/backend.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/moe.h"
#include "tessel/nn/moe_experts.h"
#include "tessel/ops/cast.h"

namespace tessel::nn {

LowPrecisionScope::LowPrecisionScope(Module& root, DType dtype)
    : LowPrecisionScope(std::vector<Module*>{&root}, dtype) {}

LowPrecisionScope::LowPrecisionScope(const std::vector<Module*>& roots, DType dtype, Defer defer,
                                     Kept kept)
    : dtype_(dtype), kept_(std::move(kept)) {
  if (dtype == DType::F32 || dtype == DType::F64) return;
  TESSEL_CHECK(dtype == DType::BF16 || dtype == DType::F16, "LowPrecisionScope: dtype ",
               dtype_name(dtype), " is not a floating dtype (expected bf16 or f16)");
  std::map<const void*, Tensor> copies;  // master storage -> its cast, shared by tied weights
  try {
    for (Module* root : roots) add(*root, defer, copies);
  } catch (...) {
    for (auto it = swapped_.rbegin(); it != swapped_.rend(); ++it) *it->first = it->second;
    throw;
  }
}

void LowPrecisionScope::for_each_member(Module& root, const std::function<void(Tensor&)>& visit) {
  std::set<const Module*> routers;
  for (auto& [name, module] : root.named_modules())
    if (auto* m = dynamic_cast<MoE*>(module)) routers.insert(m->router.get());
  for (auto& [name, module] : root.named_modules()) {
    if (routers.count(module)) continue;
    if (auto* l = dynamic_cast<Linear*>(module)) {
      visit(l->weight);
      visit(l->bias);
    } else if (auto* e = dynamic_cast<Embedding*>(module)) {
      visit(e->weight);
    } else if (auto* n = dynamic_cast<LayerNorm*>(module)) {
      visit(n->weight);
      visit(n->bias);
    } else if (auto* r = dynamic_cast<RMSNorm*>(module)) {
      visit(r->weight);
    } else if (auto* x = dynamic_cast<ExpertMLPs*>(module)) {  // the stacks of MoE experts
      for (Tensor* t : {&x->gate_proj, &x->up_proj, &x->down_proj, &x->fc_weight, &x->fc_bias,
                        &x->proj_weight, &x->proj_bias})
        visit(*t);
    }
  }
}

void LowPrecisionScope::add(Module& root, const Defer& defer,
                            std::map<const void*, Tensor>& copies) {
  for_each_member(root, [&](Tensor& member) {
    if (!member.defined() || member.dtype() == dtype_) return;
    const void* key = member.impl_ptr().get();
    if (defer && defer(member)) {
      Deferred& d = deferred_[key];
      for (Tensor* m : d.members)
        if (m == &member) return;  // a module listed under two roots
      d.members.push_back(&member);
      swapped_.emplace_back(&member, member);
      return;
    }
    Tensor& copy = copies[key];
    if (!copy.defined()) copy = copy_of(member);
    swapped_.emplace_back(&member, member);
    member = copy;
  });
}

std::vector<Tensor> LowPrecisionScope::masters(const std::vector<Module*>& roots) {
  std::vector<Tensor> out;
  std::set<const void*> seen;
  for (Module* root : roots)
    for_each_member(*root, [&](Tensor& member) {
      if (member.defined() && dtype_is_float(member.dtype()) &&
          seen.insert(member.impl_ptr().get()).second)
        out.push_back(member);
    });
  return out;
}

LowPrecisionScope::~LowPrecisionScope() {
  for (auto it = swapped_.rbegin(); it != swapped_.rend(); ++it) *it->first = it->second;
}

Tensor LowPrecisionScope::cast_deferred(const Tensor& master) {
  auto it = deferred_.find(master.impl_ptr().get());
  if (it == deferred_.end()) return Tensor();
  Deferred& d = it->second;
  // A copy made without a graph (under no_grad) would pass no gradient to a later backward.
  if (!d.copy.defined() ||
      (autograd::grad_enabled() && master.requires_grad() && !d.copy.requires_grad())) {
    d.copy = copy_of(master);
    for (Tensor* m : d.members) *m = d.copy;
  }
  return d.copy;
}

Tensor LowPrecisionScope::copy_of(const Tensor& master) {
  const Tensor held = kept_ ? kept_(master) : Tensor();
  if (!held.defined()) return ops::cast(master, dtype_);
  TESSEL_CHECK(held.dtype() == dtype_, "LowPrecisionScope: the kept copy of a master is ",
               dtype_name(held.dtype()), ", not the scope's ", dtype_name(dtype_));
  return ops::cast_kept(master, held);
}

void LowPrecisionScope::recast(const Tensor& master, const Tensor& copy) {
  TESSEL_CHECK(master.shape() == copy.shape(), "LowPrecisionScope::recast: master ", master.shape(),
               " and copy ", copy.shape(), " differ in shape");
  Tensor dst = copy.detach();
  kernels::backend_for(copy.device()).convert(master.detach(), dst);
}

}  // namespace tessel::nn
