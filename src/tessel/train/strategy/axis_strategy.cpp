// SPDX-License-Identifier: Apache-2.0
// The norm plan's axes as the gradient norm takes them.
#include "tessel/train/strategy/axis_strategy.h"

namespace tessel::train {

std::vector<NormAxis> GradNormPlan::norm_axes() const {
  std::vector<NormAxis> out;
  for (const Axis& a : axes) {
    TESSEL_CHECK(a.sums.empty() || int(a.sums.size()) == groups, "GradNormPlan: an axis gives ",
                 a.sums.size(), " group flags for ", groups, " groups");
    out.push_back({a.comm, a.sums.empty() ? std::vector<bool>(size_t(groups), true) : a.sums});
  }
  return out;
}

}  // namespace tessel::train
