// SPDX-License-Identifier: Apache-2.0
// The thread-local backend substitution behind BackendScope.
// Scopes nest: each restores the substitution that was active before it.
#include "tessel/autograd/backend_scope.h"

namespace tessel::autograd {

namespace {
thread_local kernels::Backend* t_backend_override = nullptr;
}

kernels::Backend& backend_for(Device device) {
  return t_backend_override ? *t_backend_override : kernels::backend_for(device);
}

BackendScope::BackendScope(kernels::Backend& backend) : previous_(t_backend_override) {
  t_backend_override = &backend;
}

BackendScope::~BackendScope() {
  t_backend_override = previous_;
}

}  // namespace tessel::autograd
