// SPDX-License-Identifier: Apache-2.0
// Parameter regions from initialisation recipes (materialize.h).
#include "tessel/train/materialize.h"

#include <memory>

#include "tessel/core/error.h"
#include "tessel/nn/module.h"

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

}  // namespace tessel::train
