// SPDX-License-Identifier: Apache-2.0
#include "tessel/train/layout.h"

#include "tessel/core/error.h"

namespace tessel::train {

std::string TrainLayout::str() const {
  return "dp=" + std::to_string(dp_size()) + " tp=" + std::to_string(tp_size()) +
         " pp=" + std::to_string(pp_size()) + (ep ? " ep=" + std::to_string(ep_size()) : "");
}

TrainLayout make_layout(dist::CommPtr world, int dp, int tp, int pp, int ep) {
  TESSEL_CHECK(ep >= 1 && dp % ep == 0, "train: --ep ", ep, " must be >= 1 and divide --dp ", dp,
               " (the expert-parallel groups lie inside the data-parallel group)");
  TESSEL_CHECK(dp >= 1 && tp >= 1 && pp >= 1, "train: parallel degrees must be >= 1, got --dp ", dp,
               " --tp ", tp, " --pp ", pp);
  const int world_size = world ? world->size() : 1;
  TESSEL_CHECK(dp * tp * pp == world_size, "train: --dp ", dp, " x --tp ", tp, " x --pp ", pp,
               " = ", dp * tp * pp, " ranks, but the job has ", world_size,
               "; the product of the degrees must equal the number of ranks");
  TrainLayout layout;
  if (world_size == 1) return layout;
  std::string spec;
  for (auto [name, size] : {std::pair{"dp", dp}, {"tp", tp}, {"pp", pp}}) {
    if (size == 1) continue;
    spec += (spec.empty() ? "" : ",") + std::string(name) + "=" + std::to_string(size);
  }
  layout.mesh = std::make_shared<dist::DeviceMesh>(std::move(world), spec);
  if (dp > 1) layout.dp = layout.mesh->comm_ptr("dp");
  if (tp > 1) layout.tp = layout.mesh->comm_ptr("tp");
  if (pp > 1) layout.pp = layout.mesh->comm_ptr("pp");
  if (ep > 1) {
    const int r = layout.dp->rank();
    layout.ep = layout.dp->split(r / ep, r, "ep");
    if (dp > ep) layout.ep_dp = layout.dp->split(r % ep, r, "ep_dp");
  }
  return layout;
}

TrainLayout data_parallel_layout(dist::CommPtr dp) {
  if (!dp || dp->size() == 1) return {};
  const int size = dp->size();
  return make_layout(std::move(dp), size, 1, 1);
}

}  // namespace tessel::train
