// SPDX-License-Identifier: Apache-2.0
// The CPU backend singleton: the backend of the active kernel set (kernel_set.h), wrapped in the
// profiling decorator while core/profile.h is switched on (TESSEL_PROFILE=1 switches it on for the
// whole process and prints the table at exit).
#include <cstdlib>
#include <cstring>

#include "tessel/core/profile.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/cpu/profiled_backend.h"
#include "tessel/kernels/kernel_set.h"

namespace tessel::kernels {

Backend& cpu_backend() {
  static Backend& backend = cpu_backend_for(active_kernel_set());
  // TESSEL_PROFILE=1: every call timed, the table printed at exit (core/profile.h).
  static const bool report = [] {
    const char* v = std::getenv("TESSEL_PROFILE");
    if (v != nullptr && std::strcmp(v, "1") == 0) profile::report_at_exit("TESSEL_PROFILE");
    return true;
  }();
  (void)report;
  if (profile::enabled()) [[unlikely]] {
    static Backend& timed = profiled(backend);
    return timed;
  }
  return backend;
}

}  // namespace tessel::kernels
