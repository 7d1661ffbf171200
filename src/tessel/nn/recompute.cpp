// SPDX-License-Identifier: Apache-2.0
// Names of the recomputation modes.
#include "tessel/nn/recompute.h"

#include "tessel/core/error.h"

namespace tessel::nn {

std::string_view recompute_name(Recompute mode) {
  switch (mode) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  TESSEL_FAIL("recompute_name: unknown mode ", int(mode));
}

Recompute parse_recompute(std::string_view name) {
  for (Recompute m : {Recompute::None, Recompute::Selective, Recompute::Full})
    if (recompute_name(m) == name) return m;
  TESSEL_FAIL("recompute mode \"", name, "\" is not one of none, selective, full");
}

}  // namespace tessel::nn
