// SPDX-License-Identifier: Apache-2.0
// The CPU backend singleton: the backend of the active kernel set (kernel_set.h), wrapped in the
// profiling decorator while core/profile.h is switched on.
#include "tessel/core/profile.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/cpu/profiled_backend.h"
#include "tessel/kernels/kernel_set.h"

namespace tessel::kernels {

Backend& cpu_backend() {
  static Backend& backend = cpu_backend_for(active_kernel_set());
  if (profile::enabled()) [[unlikely]] {
    static Backend& timed = profiled(backend);
    return timed;
  }
  return backend;
}

}  // namespace tessel::kernels
