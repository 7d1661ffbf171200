// SPDX-License-Identifier: Apache-2.0
// Parameter regions from initialisation recipes, and zero-page storage (materialize.h).
#include "tessel/train/materialize.h"

#include <sys/mman.h>

#include <memory>

#include "tessel/core/error.h"
#include "tessel/nn/module.h"
#include "tessel/tensor/storage.h"

namespace tessel::train {

ParameterInits parameter_inits(const nn::Module& model, const nn::init::InitRecord& record) {
  ParameterInits out;
  const std::map<std::string, nn::init::InitRecipe> recipes =
      nn::init::recipes_by_name(model, record);
  for (const auto& [name, p] : model.named_parameters())
    out.emplace(name, ParameterInit{p.shape(), recipes.at(name)});
  return out;
}

RegionSource init_region_source(std::shared_ptr<const ParameterInits> inits) {
  return [inits](const std::string& name, const PieceRegion& region, float* dst) {
    auto it = inits->find(name);
    TESSEL_CHECK(it != inits->end(), "deferred init: no recipe for '", name, "'");
    const nn::init::InitRecipe& recipe = it->second.recipe;
    check_region("deferred init of " + name, it->second.shape, region);
    for_each_run(it->second.shape, region, [&](int64_t global, int64_t n, int64_t at) {
      recipe.fill(uint64_t(global), n, dst + at);
    });
  };
}

void use_zero_pages(const Tensor& param) {
  const size_t bytes = param.nbytes();
  if (bytes == 0) return;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TESSEL_CHECK(p != MAP_FAILED, "zero pages: mmap of ", bytes, " bytes failed");
  auto storage =
      std::make_shared<Storage>(p, bytes, param.device(), [bytes](void* q) { munmap(q, bytes); });
  TensorImpl& impl = *param.impl_ptr();
  impl.storage = std::move(storage);
  impl.offset = 0;
}

}  // namespace tessel::train
