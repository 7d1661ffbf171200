// SPDX-License-Identifier: Apache-2.0
// The thread-local recording flag behind GradModeGuard / NoGradGuard.
// Thread-local, so a data-loading or communication thread never sees another's mode.
#include "tessel/autograd/grad_mode.h"

namespace tessel::autograd {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() {
  return t_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  t_grad_enabled = enabled;
}

}  // namespace tessel::autograd
