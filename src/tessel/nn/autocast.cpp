// SPDX-License-Identifier: Apache-2.0
// LowPrecisionScope: the layers read their parameters through public handle members, so the
// scope replaces those handles (not the registered parameters, which stay the f32 masters the
// optimizer, the state dict and the gradient hooks see) and restores them on exit.
#include "tessel/nn/autocast.h"

#include <map>

#include "tessel/nn/layers.h"
#include "tessel/ops/cast.h"

namespace tessel::nn {

LowPrecisionScope::LowPrecisionScope(Module& root, DType dtype) {
  if (dtype == DType::F32 || dtype == DType::F64) return;
  TESSEL_CHECK(dtype == DType::BF16 || dtype == DType::F16, "LowPrecisionScope: dtype ",
               dtype_name(dtype), " is not a floating dtype (expected bf16 or f16)");
  std::map<const void*, Tensor> copies;  // master storage -> its cast, shared by tied weights
  auto swap = [&](Tensor& member) {
    if (!member.defined() || member.dtype() == dtype) return;
    Tensor& copy = copies[member.impl_ptr().get()];
    if (!copy.defined()) copy = ops::cast(member, dtype);
    swapped_.emplace_back(&member, member);
    member = copy;
  };
  try {
    for (auto& [name, module] : root.named_modules()) {
      if (auto* l = dynamic_cast<Linear*>(module)) {
        swap(l->weight);
        swap(l->bias);
      } else if (auto* e = dynamic_cast<Embedding*>(module)) {
        swap(e->weight);
      } else if (auto* n = dynamic_cast<LayerNorm*>(module)) {
        swap(n->weight);
        swap(n->bias);
      } else if (auto* r = dynamic_cast<RMSNorm*>(module)) {
        swap(r->weight);
      }
    }
  } catch (...) {
    for (auto it = swapped_.rbegin(); it != swapped_.rend(); ++it) *it->first = it->second;
    throw;
  }
}

LowPrecisionScope::~LowPrecisionScope() {
  for (auto it = swapped_.rbegin(); it != swapped_.rend(); ++it) *it->first = it->second;
}

}  // namespace tessel::nn
