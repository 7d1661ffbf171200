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
    const Shape& shape = it->second.shape;
    const nn::init::InitRecipe& recipe = it->second.recipe;
    const size_t nd = size_t(shape.ndim());
    TESSEL_CHECK(region.start.size() == nd && region.length.size() == nd && region.begin >= 0 &&
                     region.begin <= region.end && region.end <= region.box_numel(),
                 "deferred init: region ", region.str(), " of '", name, "' ", shape);
    for (size_t d = 0; d < nd; ++d)
      TESSEL_CHECK(region.start[d] >= 0 && region.start[d] + region.length[d] <= shape[int(d)],
                   "deferred init: region ", region.str(), " outside '", name, "' ", shape);
    if (nd == 0) {
      if (region.end > region.begin) dst[0] = recipe.at(0);
      return;
    }
    // Box element k lies in row k / L of the box (L: its last dim's length); a row is
    // consecutive in the global tensor too.
    const int64_t last = region.length[nd - 1];
    int64_t k = region.begin;
    while (k < region.end) {
      const int64_t row = k / last, col = k % last;
      const int64_t n = std::min(last - col, region.end - k);
      int64_t global = 0, rest = row;
      std::vector<int64_t> index(nd, 0);
      for (size_t d = nd - 1; d-- > 0;) {
        index[d] = rest % region.length[d];
        rest /= region.length[d];
      }
      for (size_t d = 0; d + 1 < nd; ++d)
        global = global * shape[int(d)] + region.start[d] + index[d];
      global = global * shape[int(nd - 1)] + region.start[nd - 1] + col;
      recipe.fill(uint64_t(global), n, dst + (k - region.begin));
      k += n;
    }
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
