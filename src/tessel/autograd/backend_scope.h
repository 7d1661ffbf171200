// SPDX-License-Identifier: Apache-2.0
// Which kernel backend ops and the backward engine use: the backend of the tensors' device,
// unless a BackendScope on this thread substitutes another one (tests run the differentiable
// ops on the fp64 reference backend this way, independently of the production kernels).
#pragma once

#include "tessel/kernels/backend.h"

namespace tessel::autograd {

kernels::Backend& backend_for(Device device);

class BackendScope {
 public:
  explicit BackendScope(kernels::Backend& backend);
  ~BackendScope();
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;

 private:
  kernels::Backend* previous_;
};

}  // namespace tessel::autograd
